// prefix_store: a view of another store in which every key is `prefix/key`, so several users
// (backends, sub-groups, re-initialisations) share one store without their keys colliding.
// Waits use the wrapped store's timeout (set it there); timeout errors name the prefixed keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

class prefix_store final : public store {
 public:
  // invalid_argument_error when inner is null.
  prefix_store(std::string prefix, std::shared_ptr<store> inner);

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;
  bool hold(const std::string& key, const bytes& value) override {
    return inner_->hold(full(key), value);
  }
  // Forwarded: the wrapped store is the one that may host the server.
  void mark_job_failed() noexcept override { inner_->mark_job_failed(); }

  const std::string& prefix() const noexcept { return prefix_; }
  const std::shared_ptr<store>& inner() const noexcept { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<store> inner_;
};

}  // namespace distcomm
