#include "gloo_store.hpp"

#include "distcomm/core/error.hpp"

namespace distcomm::detail {

void gloo_store_adapter::set(const std::string& k, const std::vector<char>& data) {
  kv_->set(key(k), bytes(data.begin(), data.end()));
}

std::vector<char> gloo_store_adapter::get(const std::string& k) {
  const bytes v = kv_->get(key(k));
  return std::vector<char>(v.begin(), v.end());
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys) { kv_->wait(full(keys)); }

// gloo passes its context's timeout, which the backend set to its own (gloo_options::timeout,
// DISTCOMM_TIMEOUT unless given); the store's own timeout also applies when shorter.
void gloo_store_adapter::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& timeout) {
  try {
    store_wait(*kv_, full(keys), timeout);
  } catch (const timeout_error& e) {
    throw timeout_error(std::string("gloo: waiting for the peers' addresses: ") + e.what() +
                        "; is every rank running?");
  }
}

std::vector<std::string> gloo_store_adapter::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(key(k));
  return out;
}

}  // namespace distcomm::detail
