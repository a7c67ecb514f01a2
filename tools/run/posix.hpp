// The POSIX plumbing under distcomm-run's supervisor: pipes, whole writes, the list of this
// process's children, and the signal setup (handlers that only write to a self-pipe, dispositions
// put back for the children).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace distcomm::launcher {

struct fd_pair {
  int read = -1;
  int write = -1;
};

// A pipe whose both ends are close-on-exec. Throws std::system_error.
fd_pair make_pipe();
// Closes fd when open and sets it to -1.
void close_fd(int& fd);
void set_nonblocking(int fd);
// Writes all n bytes (retrying on EINTR and short writes); false on any other error.
bool write_all(int fd, const char* data, std::size_t n);

// The processes whose parent is this one. Besides the ranks, these are processes the ranks started
// and left behind (even after setsid or a double fork) once this process is their subreaper.
// Empty where the system cannot tell (not Linux).
std::vector<pid_t> own_children();

// The file execvp would run for `name`: `name` itself when it holds a '/', else the first
// executable `name` in PATH. Empty when there is none.
std::string find_program(const std::string& name);

// Runs argv (argv[0] as execvp finds it) with stdin from /dev/null and returns what it wrote to
// stdout and stderr (at most 64 KiB). Throws std::system_error when it cannot be started, and
// std::runtime_error when it has not finished within `limit` (it is killed then).
std::string command_output(const std::vector<std::string>& argv, std::chrono::milliseconds limit);

// True when one process may read another's memory with process_vm_readv, as Open MPI's
// shared-memory transport does for large messages: a child that lets any process trace it (as
// Open MPI's ranks do) is read by this one. Containers without CAP_SYS_PTRACE (Docker's default
// seccomp profile) and Yama ptrace_scope 2 or 3 refuse it. False where Linux is not.
bool cross_process_reads_work();

// Installs the launcher's dispositions: SIGINT, SIGTERM, SIGHUP and SIGCHLD (also raised when a
// child is stopped or continued) write their number to a self-pipe (read by the main loop),
// SIGPIPE is ignored. A forwarded signal the launcher inherited as ignored stays ignored (nohup,
// background jobs of a script), and the job is then not stopped by it either. The destructor puts
// back what was inherited. One at a time per process.
class signal_setup {
 public:
  signal_setup();
  ~signal_setup();
  signal_setup(const signal_setup&) = delete;
  signal_setup& operator=(const signal_setup&) = delete;

  // The read end of the self-pipe (non-blocking): one byte per signal received.
  int fd() const noexcept;
  // Puts back the inherited dispositions and mask; also what a child does before exec
  // (async-signal-safe).
  void restore() const noexcept;

  static constexpr std::array<int, 5> managed = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};

 private:
  std::array<struct sigaction, managed.size()> original_{};
  sigset_t original_mask_{};
};

}  // namespace distcomm::launcher
