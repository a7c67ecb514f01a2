// A DistComm store across the plugin ABI, both ways: a distcomm::store as the C calls of
// distcomm_store_v1 / distcomm_opened_store_v1 (what the host offers a backend plugin, what a
// store plugin returns), and those C calls as a distcomm::store (host_store). Exceptions become
// status codes plus text at the boundary and come back as the same DistComm exceptions.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/distcomm_store_plugin_v1.h"
#include "distcomm/plugin/abi.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace distcomm::plugin {

// Calls check() until every key is set or `until` passes, the pause growing to 10 ms; then
// timeout_error naming the keys still missing after `timeout` (what the caller waited in all).
inline void poll_until(store& s, const std::vector<std::string>& keys, deadline until,
                       std::chrono::duration<double> timeout) {
  auto pause = std::chrono::microseconds(500);
  while (!s.check(keys)) {
    if (clock::now() >= until) {
      std::vector<std::string> missing;
      for (const auto& k : keys) {
        if (!s.check({k})) missing.push_back(k);
      }
      if (missing.empty()) return;
      throw timeout_error(detail::missing_keys_message("store", missing, timeout));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

// Waits until every key is set or `until` passes: the store's own wait when the deadline is not
// before its timeout (give or take the 0.1 s a call across the ABI may take), else poll_until.
inline void wait_until(store& s, const std::vector<std::string>& keys, deadline until) {
  const auto left = until - clock::now();
  if (until == deadline::max() || left + std::chrono::milliseconds(100) >=
                                      std::chrono::duration_cast<clock::duration>(s.timeout())) {
    s.wait(keys);
    return;
  }
  poll_until(s, keys, until, left);
}

// The C calls over the store Of(user) returns (it may throw: the call then fails with its text).
template <store& (*Of)(void*)>
struct store_calls {
  static bytes of_bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    return n == 0 ? bytes() : bytes(b, b + n);
  }
  static void copy_out(const bytes& v, void* buffer, std::size_t capacity, std::size_t* size) {
    *size = v.size();
    if (v.size() <= capacity && !v.empty())
      std::copy(v.begin(), v.end(), static_cast<char*>(buffer));
  }
  static std::vector<std::string> names(const char* const* keys, std::size_t count) {
    return std::vector<std::string>(keys, keys + count);
  }

  static int set(void* user, const char* key, const void* value, std::size_t size,
                 distcomm_error_v1* err) {
    return guarded(err, [&] { Of(user).set(key, of_bytes(value, size)); });
  }
  static int get(void* user, const char* key, std::int64_t deadline_ns, void* buffer,
                 std::size_t capacity, std::size_t* size, distcomm_error_v1* err) {
    return guarded(err, [&] {
      store& s = Of(user);
      wait_until(s, {key}, from_ns(deadline_ns));  // the caller's deadline may be the earlier
      copy_out(s.get(key), buffer, capacity, size);
    });
  }
  static int add(void* user, const char* key, std::int64_t delta, std::int64_t* result,
                 distcomm_error_v1* err) {
    return guarded(err, [&] { *result = Of(user).add(key, delta); });
  }
  static int check(void* user, const char* const* keys, std::size_t count, int* all_set,
                   distcomm_error_v1* err) {
    return guarded(err, [&] { *all_set = Of(user).check(names(keys, count)) ? 1 : 0; });
  }
  static int wait(void* user, const char* const* keys, std::size_t count, std::int64_t deadline_ns,
                  distcomm_error_v1* err) {
    return guarded(err, [&] { wait_until(Of(user), names(keys, count), from_ns(deadline_ns)); });
  }
  static int compare_set(void* user, const char* key, const void* expected,
                         std::size_t expected_size, const void* desired, std::size_t desired_size,
                         void* buffer, std::size_t capacity, std::size_t* size,
                         distcomm_error_v1* err) {
    return guarded(err, [&] {
      copy_out(Of(user).compare_set(key, of_bytes(expected, expected_size),
                                    of_bytes(desired, desired_size)),
               buffer, capacity, size);
    });
  }
};

// The store behind C calls, as a distcomm::store: the store a host offers a backend plugin
// (distcomm_store_v1: waits poll check(), compare_set is refused), or an opened store plugin
// (distcomm_opened_store_v1, closed when this is destroyed). Waits end at the store's timeout.
class host_store final : public store {
 public:
  host_store(const distcomm_store_v1& s, std::chrono::duration<double> timeout) {
    s_.base = s;
    set_timeout(timeout);
  }
  host_store(const distcomm_opened_store_v1& s, std::chrono::duration<double> timeout) : s_(s) {
    set_timeout(timeout);
  }
  ~host_store() override {
    if (s_.close != nullptr) s_.close(s_.base.user);
  }
  host_store(const host_store&) = delete;
  host_store& operator=(const host_store&) = delete;

  void set(const std::string& key, const bytes& value) override {
    error_buffer err;
    check_status(s_.base.set(s_.base.user, key.c_str(), value.data(), value.size(), &err), "set",
                 err);
  }

  bytes get(const std::string& key) override {
    const std::int64_t until = to_ns(deadline_after(timeout()));
    return fetched(
        "get", [&](void* buffer, std::size_t capacity, std::size_t* size, distcomm_error_v1* err) {
          return s_.base.get(s_.base.user, key.c_str(), until, buffer, capacity, size, err);
        });
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    error_buffer err;
    std::int64_t result = 0;
    check_status(s_.base.add(s_.base.user, key.c_str(), delta, &result, &err), "add", err);
    return result;
  }

  bool check(const std::vector<std::string>& keys) override {
    const std::vector<const char*> names = c_names(keys);
    error_buffer err;
    int all_set = 0;
    check_status(s_.base.check(s_.base.user, names.data(), names.size(), &all_set, &err), "check",
                 err);
    return all_set != 0;
  }

  void wait(const std::vector<std::string>& keys) override {
    if (s_.wait == nullptr) {
      poll_until(*this, keys, deadline_after(timeout()), timeout());
      return;
    }
    const std::vector<const char*> names = c_names(keys);
    error_buffer err;
    check_status(
        s_.wait(s_.base.user, names.data(), names.size(), to_ns(deadline_after(timeout())), &err),
        "wait", err);
  }

  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override {
    if (s_.compare_set == nullptr) {
      throw invalid_argument_error("store: compare_set of '" + key +
                                   "' is not offered to plugins by ABI version 1");
    }
    return fetched("compare_set", [&](void* buffer, std::size_t capacity, std::size_t* size,
                                      distcomm_error_v1* err) {
      return s_.compare_set(s_.base.user, key.c_str(), expected.data(), expected.size(),
                            desired.data(), desired.size(), buffer, capacity, size, err);
    });
  }

  void mark_job_failed() noexcept override {
    if (s_.base.mark_failed != nullptr) s_.base.mark_failed(s_.base.user);
  }

 private:
  static void check_status(int status, const char* what, const distcomm_error_v1& err) {
    if (status != DISTCOMM_V1_OK) {
      throw_status(status, "store", what, std::string("store ") + what + ": " + error_text(err));
    }
  }
  static std::vector<const char*> c_names(const std::vector<std::string>& keys) {
    std::vector<const char*> names;
    names.reserve(keys.size());
    for (const auto& k : keys) names.push_back(k.c_str());
    return names;
  }
  // A value copied out by call(buffer, capacity, &size, &err): again, with room, when too small.
  // The size is the plugin's word: no store holds a value above store_max_value_bytes.
  template <class Call>
  static bytes fetched(const char* what, Call&& call) {
    bytes value(64);
    for (;;) {
      error_buffer err;
      std::size_t size = 0;
      check_status(call(value.data(), value.size(), &size, &err), what, err);
      if (size <= value.size()) {
        value.resize(size);
        return value;
      }
      if (size > store_max_value_bytes) {
        throw rendezvous_error(std::string("store ") + what + ": the plugin says the value has " +
                               std::to_string(size) + " bytes, more than a store holds (" +
                               std::to_string(store_max_value_bytes) +
                               "): the plugin is broken; fix or replace it");
      }
      value.resize(size);
    }
  }

  distcomm_opened_store_v1 s_{};
};

// What a store plugin's open() is given (distcomm_store_open_args_v1), in C++ terms.
struct store_open {
  std::string url;      // the whole URL, for messages
  std::string address;  // what follows "<scheme>://"
  std::chrono::duration<double> timeout{300.0};
  std::string token;  // "" when none
  job_identity job;
  int rank = 0;
  void (*log_to)(void*, int, const char*) = nullptr;
  void* log_user = nullptr;

  // A line in the host's log.
  void log(log_level level, const std::string& line) const {
    if (log_to != nullptr) log_to(log_user, static_cast<int>(level), line.c_str());
  }
};

// The export side of a store plugin: its table, open() calling the factory, and the opened
// store's calls over what the factory made. DISTCOMM_EXPORT_STORE_V1 defines the entry point.
struct exported_store {
  using factory = std::shared_ptr<store> (*)(const store_open&);

  static const distcomm_store_plugin_table_v1* table(const char* scheme, factory f) {
    static const distcomm_store_plugin_table_v1 t = [&] {
      factory_ = f;
      distcomm_store_plugin_table_v1 d{};
      d.version = DISTCOMM_STORE_PLUGIN_V1_VERSION;
      d.struct_size = sizeof d;
      d.scheme = scheme;
      d.open = &open;
      return d;
    }();
    return &t;
  }

 private:
  struct context {
    std::shared_ptr<store> s;
  };
  static store& of(void* user) { return *static_cast<context*>(user)->s; }
  using calls = store_calls<&of>;

  static int open(const distcomm_store_open_args_v1* a, distcomm_opened_store_v1* out,
                  distcomm_error_v1* err) {
    return guarded(err, [&] {
      store_open o;
      o.url = a->url != nullptr ? a->url : "";
      o.address = a->address != nullptr ? a->address : "";
      o.timeout = std::chrono::duration<double>(a->timeout_s);
      o.token = a->token != nullptr ? a->token : "";
      o.job = job_identity{a->world_size, a->job_id != nullptr ? a->job_id : ""};
      o.rank = a->rank;
      o.log_to = a->log;
      o.log_user = a->log_user;
      auto ctx = std::make_unique<context>();
      ctx->s = factory_(o);
      ctx->s->set_timeout(o.timeout);
      *out = distcomm_opened_store_v1{};
      out->base.user = ctx.get();
      out->base.set = &calls::set;
      out->base.get = &calls::get;
      out->base.add = &calls::add;
      out->base.check = &calls::check;
      out->base.mark_failed = [](void* user) { of(user).mark_job_failed(); };
      out->wait = &calls::wait;
      out->compare_set = &calls::compare_set;
      out->close = [](void* user) { delete static_cast<context*>(user); };
      ctx.release();
    });
  }

  static inline factory factory_ = nullptr;
};

}  // namespace distcomm::plugin

// Defines this shared object's entry point, distcomm_store_plugin_v1(), for the stores of
// `scheme` (a string literal) made by the factory that follows it (anything convertible to
// std::shared_ptr<distcomm::store> (*)(const distcomm::plugin::store_open&)).
#define DISTCOMM_EXPORT_STORE_V1(scheme, ...)                                             \
  extern "C" __attribute__((visibility("default"))) const distcomm_store_plugin_table_v1* \
  distcomm_store_plugin_v1(void) {                                                        \
    return ::distcomm::plugin::exported_store::table(scheme, __VA_ARGS__);                \
  }
