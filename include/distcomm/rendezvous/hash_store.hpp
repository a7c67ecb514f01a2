// hash_store: the key-value store inside one process (ranks as threads: the local backend, tests).
// Thread-safe; waits block on a condition variable until the keys arrive or the timeout passes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

class hash_store final : public store {
 public:
  explicit hash_store(std::chrono::duration<double> timeout = std::chrono::duration<double>(300.0));

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;

 private:
  // Waits (lock held) until every key is present; throws timeout_error naming the missing ones.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   const char* who);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, bytes> data_;
};

}  // namespace distcomm
