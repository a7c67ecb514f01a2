// Single copy between the ranks' processes: a rank reads a peer's buffer straight out of that
// process (process_vm_readv, Linux 3.2's cross-memory attach), where the staging path moves every
// byte through the segments twice, in and out. The large collectives use it (shm.cpp); the
// ranks find out at start-up whether every one of them may read every other (a container's
// seccomp profile or Yama's ptrace_scope can forbid it) and all take the same path.
// Internal to backends/shm.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace distcomm::detail::shm {

// Lets the peers of this process read it where Yama's ptrace_scope 1 allows reading descendants
// only (the ranks are siblings): PR_SET_PTRACER_ANY, as Open MPI's CMA does. It widens nothing
// beyond this user's own processes, which ptrace's own rules still require. "" when single copy
// is allowed as far as this process can tell, else why not (ptrace_scope 2 or 3).
std::string allow_peer_reads();

// Reads the 8 bytes at `remote` in process `pid`: "" when they hold `expected`, else why not
// (the system's refusal, or other bytes).
std::string probe_peer(pid_t pid, std::uint64_t remote, std::uint64_t expected);

// Copies `bytes` from `remote` in process `pid` (rank `peer`) to `local`. peer_lost_error when
// the process is gone, backend_error for any other refusal.
void read_peer(pid_t pid, int peer, std::uint64_t remote, void* local, std::size_t bytes);

}  // namespace distcomm::detail::shm
