// The name the next communicator made from a backend gives its flight recorder, in place of the
// process's next "c<n>" (flight_recorder.hpp, next_recorder_name()). A job that grows connects
// its old and its new members anew, each after a different history of communicators: they name
// the grown one alike with this ("g0", "g1", ...) so that distcomm-trace matches its records.
#pragma once

#include <string>

namespace distcomm::trace {

void name_next_recorder(std::string name);

}  // namespace distcomm::trace
