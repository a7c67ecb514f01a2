#include "gloo_store.hpp"

namespace distcomm::detail {

void gloo_store_adapter::set(const std::string& k, const std::vector<char>& data) {
  kv_->set(key(k), bytes(data.begin(), data.end()));
}

std::vector<char> gloo_store_adapter::get(const std::string& k) {
  const bytes v = kv_->get(key(k));
  return std::vector<char>(v.begin(), v.end());
}

void gloo_store_adapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(key(k));
  kv_->wait(full);
}

// The store's own timeout bounds the wait (it names the missing keys); gloo's shorter default
// (30 s) would only make a slow start fail with a vaguer message.
void gloo_store_adapter::wait(const std::vector<std::string>& keys,
                              const std::chrono::milliseconds& /*timeout*/) {
  wait(keys);
}

}  // namespace distcomm::detail
