// prefix_store: forwards every call with `prefix/` in front of the keys.
#include "distcomm/rendezvous/prefix_store.hpp"

#include <utility>

#include "distcomm/core/error.hpp"

namespace distcomm {

prefix_store::prefix_store(std::string prefix, std::shared_ptr<store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) {
    throw invalid_argument_error("prefix_store '" + prefix_ + "': the wrapped store is null");
  }
  // Mirrors the wrapped store's deadline, which is the one its waits honour.
  set_timeout(inner_->timeout());
}

std::vector<std::string> prefix_store::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void prefix_store::set(const std::string& key, const bytes& value) {
  inner_->set(full(key), value);
}

bytes prefix_store::get(const std::string& key) { return inner_->get(full(key)); }

std::int64_t prefix_store::add(const std::string& key, std::int64_t delta) {
  return inner_->add(full(key), delta);
}

bool prefix_store::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }

void prefix_store::wait(const std::vector<std::string>& keys) { inner_->wait(full(keys)); }

bytes prefix_store::compare_set(const std::string& key, const bytes& expected,
                                const bytes& desired) {
  return inner_->compare_set(full(key), expected, desired);
}

}  // namespace distcomm
