// hash_store: a map under a mutex; waiters sleep on a condition variable notified by every write.
#include "distcomm/rendezvous/hash_store.hpp"

#include <algorithm>

#include "store_detail.hpp"

namespace distcomm {

hash_store::hash_store(std::chrono::duration<double> timeout) { set_timeout(timeout); }

void hash_store::set(const std::string& key, const bytes& value) {
  detail::check_key("hash_store set", key);
  detail::check_value("hash_store set", key, value.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

bytes hash_store::get(const std::string& key) {
  detail::check_key("hash_store get", key);
  std::unique_lock<std::mutex> lock(mutex_);
  wait_locked(lock, {key}, "hash_store get");
  return data_.at(key);
}

std::int64_t hash_store::add(const std::string& key, std::int64_t delta) {
  detail::check_key("hash_store add", key);
  std::int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = data_.find(key);
    result =
        detail::add_to_counter("hash_store", key, it == data_.end() ? nullptr : &it->second, delta);
    data_[key] = detail::encode_counter(result);
  }
  changed_.notify_all();
  return result;
}

bool hash_store::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("hash_store check", k);
  std::lock_guard<std::mutex> lock(mutex_);
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

void hash_store::wait(const std::vector<std::string>& keys) {
  for (const auto& k : keys) detail::check_key("hash_store wait", k);
  std::unique_lock<std::mutex> lock(mutex_);
  wait_locked(lock, keys, "hash_store wait");
}

bytes hash_store::compare_set(const std::string& key, const bytes& expected, const bytes& desired) {
  detail::check_key("hash_store compare_set", key);
  detail::check_value("hash_store compare_set", key, desired.size());
  bytes result;
  bool wrote = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = data_.find(key);
    const bytes* current = it == data_.end() ? nullptr : &it->second;
    if (detail::compare_set_applies(current, expected)) {
      data_[key] = desired;
      result = desired;
      wrote = true;
    } else if (current) {
      result = *current;
    }
  }
  if (wrote) changed_.notify_all();
  return result;
}

void hash_store::wait_locked(std::unique_lock<std::mutex>& lock,
                             const std::vector<std::string>& keys, const char* who) {
  const auto t = timeout();
  const auto deadline = detail::deadline_after(t);
  const auto all_present = [&] {
    return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
  };
  if (changed_.wait_until(lock, deadline, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (!data_.count(k)) missing.push_back(k);
  }
  detail::throw_missing_keys(who, missing, t);
}

}  // namespace distcomm
