#include "c10d_store.hpp"

#include <chrono>
#include <utility>

#include "distcomm/core/error.hpp"

namespace distcomm::torch_binding {

namespace {

// Names this store in errors.
const char* const who = "the PyTorch store";

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// Runs a c10d call; its c10::Error (a socket error, a timeout inside the store) becomes
// rendezvous_error naming what was asked.
template <class F>
auto guarded(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw rendezvous_error("the PyTorch store failed during " + what + ": " +
                           e.what_without_backtrace());
  }
}

}  // namespace

c10d_store::c10d_store(c10::intrusive_ptr<c10d::Store> s, std::chrono::duration<double> timeout)
    : s_(std::move(s)) {
  set_timeout(timeout);
}

void c10d_store::set(const std::string& key, const bytes& value) {
  detail::check_key(who, key);
  detail::check_value(who, key, value.size());
  guarded("set(" + key + ")", [&] { s_->set(key, value); });
}

bytes c10d_store::get(const std::string& key) {
  detail::check_key(who, key);
  wait({key});
  return guarded("get(" + key + ")", [&] { return s_->get(key); });
}

// c10d's server drops the connection on a value that is not an integer, and wraps around on
// overflow: the value is checked here first (a key being set meanwhile is the caller's race).
std::int64_t c10d_store::add(const std::string& key, std::int64_t delta) {
  detail::check_key(who, key);
  return guarded("add(" + key + ")", [&] {
    if (s_->check({key})) {
      const bytes current = s_->get(key);
      detail::add_to_counter(who, key, &current, delta);
    }
    return s_->add(key, delta);
  });
}

bool c10d_store::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) detail::check_key(who, k);
  return guarded("check(" + joined(keys) + ")", [&] { return s_->check(keys); });
}

// c10d's own wait with our timeout; when it expires, the keys still missing are named.
void c10d_store::wait(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) detail::check_key(who, k);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout());
  try {
    s_->wait(keys, ms);
  } catch (const c10::Error& e) {
    std::vector<std::string> missing;
    try {
      for (const std::string& k : keys) {
        if (!s_->check({k})) missing.push_back(k);
      }
    } catch (const c10::Error&) {
      missing = keys;  // the store itself is gone
    }
    if (missing.empty()) return;  // set in the meantime
    throw timeout_error(detail::missing_keys_message(who, missing, timeout()) + " (" +
                        e.what_without_backtrace() +
                        "): a rank of the group has not reached this point; is every rank "
                        "running and in the same collective?");
  }
}

bytes c10d_store::compare_set(const std::string& key, const bytes& expected, const bytes& desired) {
  detail::check_key(who, key);
  detail::check_value(who, key, desired.size());
  return guarded("compare_set(" + key + ")", [&] {
    bytes after = s_->compareSet(key, expected, desired);
    if (!expected.empty() && after == expected && (expected != desired || !s_->check({key}))) {
      after.clear();
    }
    return after;
  });
}

}  // namespace distcomm::torch_binding
