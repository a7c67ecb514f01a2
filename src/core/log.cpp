#include "distcomm/log.hpp"

#include <strings.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace distcomm {
namespace {

int level_from_env() noexcept {
  const char* v = std::getenv("DISTCOMM_LOG");
  if (v == nullptr || *v == '\0') return static_cast<int>(log_level::warn);
  const log_level levels[] = {log_level::error, log_level::warn, log_level::info, log_level::debug};
  for (log_level l : levels) {
    if (strcasecmp(v, to_string(l)) == 0) return static_cast<int>(l);
  }
  // config::from_env rejects bad values loudly; logging itself must never throw.
  return static_cast<int>(log_level::warn);
}

std::atomic<int>& level_storage() noexcept {
  static std::atomic<int> level{level_from_env()};
  return level;
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

void log(log_level l, const std::string& message) {
  if (!log_enabled(l)) return;
  // One fprintf per line so lines from several threads do not interleave mid-line.
  std::fprintf(stderr, "[distcomm %s] %s\n", to_string(l), message.c_str());
}

}  // namespace distcomm
