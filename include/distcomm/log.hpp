// Minimal leveled logging to stderr. Lines look like `[distcomm warn] ...`. The level is process
// wide: warn until a communicator applies its config's DISTCOMM_LOG, or set_log_level() is called.
#pragma once

#include <string>

namespace distcomm {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

const char* to_string(log_level l) noexcept;

// The active level.
log_level current_log_level() noexcept;
void set_log_level(log_level l) noexcept;

inline bool log_enabled(log_level l) noexcept { return l <= current_log_level(); }
void log(log_level l, const std::string& message);

// Where enabled lines go instead of stderr; nullptr restores stderr. Process wide, like the
// level. A backend plugin sets it to hand its lines to the program that loaded it. A line logged
// from inside the sink goes to stderr.
using log_sink = void (*)(void* user, log_level l, const char* message);
void set_log_sink(log_sink sink, void* user) noexcept;

}  // namespace distcomm
