#include "distcomm/log.hpp"

#include <atomic>
#include <cstdio>
#include <string>

namespace distcomm {
namespace {

std::atomic<int>& level_storage() noexcept {
  static std::atomic<int> level{static_cast<int>(log_level::warn)};
  return level;
}

struct sink_state {
  std::atomic<log_sink> sink{nullptr};
  std::atomic<void*> user{nullptr};
};

sink_state& sink_storage() noexcept {
  static sink_state s;
  return s;
}

}  // namespace

const char* to_string(log_level l) noexcept {
  switch (l) {
    case log_level::error:
      return "error";
    case log_level::warn:
      return "warn";
    case log_level::info:
      return "info";
    case log_level::debug:
      return "debug";
  }
  return "warn";
}

log_level current_log_level() noexcept {
  return static_cast<log_level>(level_storage().load(std::memory_order_relaxed));
}

void set_log_level(log_level l) noexcept {
  level_storage().store(static_cast<int>(l), std::memory_order_relaxed);
}

void set_log_sink(log_sink sink, void* user) noexcept {
  sink_storage().user.store(user);
  sink_storage().sink.store(sink);
}

void log(log_level l, const std::string& message) {
  if (!log_enabled(l)) return;
  static thread_local bool in_sink = false;
  if (const log_sink sink = sink_storage().sink.load(); sink != nullptr && !in_sink) {
    in_sink = true;
    sink(sink_storage().user.load(), l, message.c_str());
    in_sink = false;
    return;
  }
  // One fprintf per line so lines from several threads do not interleave mid-line.
  std::fprintf(stderr, "[distcomm %s] %s\n", to_string(l), message.c_str());
}

}  // namespace distcomm
