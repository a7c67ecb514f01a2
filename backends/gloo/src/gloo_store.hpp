// gloo::rendezvous::Store on top of distcomm::store, every key under `prefix/`, so gloo's pair
// addresses travel through DistComm's (authenticated) store and communicators do not clash.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm::detail {

class gloo_store_adapter : public gloo::rendezvous::Store {
 public:
  gloo_store_adapter(std::shared_ptr<store> kv, std::string prefix)
      : kv_(std::move(kv)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  std::shared_ptr<store> kv_;
  std::string prefix_;
};

}  // namespace distcomm::detail
