#include "single_copy.hpp"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "distcomm/backends/shm.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail::shm {

std::string allow_peer_reads() {
  int scope = 0;
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  if (!(yama >> scope)) return "";  // no Yama: ptrace's own rules (the same user) apply
  if (scope >= 2) {
    return "Yama's ptrace_scope is " + std::to_string(scope) +
           " (/proc/sys/kernel/yama/ptrace_scope), which forbids reading another process";
  }
#ifdef PR_SET_PTRACER
  if (scope == 1) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
  return "";
}

std::string probe_peer(pid_t pid, std::uint64_t remote, std::uint64_t expected) {
  std::uint64_t seen = 0;
  iovec local{&seen, sizeof seen};
  iovec from{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote)), sizeof seen};
  const ssize_t n = ::process_vm_readv(pid, &local, 1, &from, 1, 0);
  if (n < 0) {
    return std::string("process_vm_readv of process ") + std::to_string(pid) +
           " failed: " + std::strerror(errno);
  }
  if (n != static_cast<ssize_t>(sizeof seen) || seen != expected) {
    return "process_vm_readv of process " + std::to_string(pid) + " read other bytes than it wrote";
  }
  return "";
}

void read_peer(pid_t pid, int peer, std::uint64_t remote, void* local, std::size_t bytes) {
  auto* to = static_cast<unsigned char*>(local);
  while (bytes != 0) {
    iovec l{to, bytes};
    iovec r{reinterpret_cast<void*>(static_cast<std::uintptr_t>(remote)), bytes};
    const ssize_t n = ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) {
      throw peer_lost_error("shm: rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                            ") exited while its buffer was read");
    }
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      throw backend_error(shm_backend::name, "process_vm_readv", e,
                          "reading " + std::to_string(bytes) + " bytes of rank " +
                              std::to_string(peer) + "'s buffer: " + std::strerror(e));
    }
    to += n;
    remote += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace distcomm::detail::shm
