// The name the next communicator made from a backend gives its flight recorder, in place of the
// process's next "c<n>" (flight_recorder.hpp, next_recorder_identity()), and, where given, the
// job ranks of its members in its own order (else 0 .. size-1). A job that grows connects its old
// and its new members anew, each after a different history of communicators: they name the grown
// one alike with this ("g0", "g1", ...) so that distcomm-trace matches its records. The torch
// binding names each group's after torch's group, with torch's global ranks: a group that only
// some ranks belong to is made on those alone.
#pragma once

#include <string>
#include <vector>

namespace distcomm::trace {

void name_next_recorder(std::string name, std::vector<int> job_ranks = {});

}  // namespace distcomm::trace
