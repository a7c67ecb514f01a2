// What init() of the launcher's job was asked (backend, strategy, settings): grow() connects the
// grown job the same way, so that the old members choose what the replacements' own init() does
// (a hierarchical job is rebuilt as one where its hosts allow).
#pragma once

#include <optional>

#include "distcomm/init.hpp"

namespace distcomm::detail {

void remember_launch_options(const init_options& options);
// The options of the last init() of the launcher's job in this process, if any.
std::optional<init_options> launch_options();

}  // namespace distcomm::detail
