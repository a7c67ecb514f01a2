// Minimal leveled logging to stderr, controlled by DISTCOMM_LOG (error, warn, info, debug).
// Lines look like `[distcomm warn] ...`; the level is read once, at first use.
#pragma once

#include <string>

namespace distcomm {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

const char* to_string(log_level l) noexcept;

// The active level (DISTCOMM_LOG at first use, or what set_log_level chose).
log_level current_log_level() noexcept;
void set_log_level(log_level l) noexcept;

inline bool log_enabled(log_level l) noexcept { return l <= current_log_level(); }
void log(log_level l, const std::string& message);

}  // namespace distcomm
