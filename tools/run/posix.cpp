#include "posix.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace distcomm::launcher {

fd_pair make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  return {fds[0], fds[1]};
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

bool write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
#ifdef __linux__
  const std::string self = std::to_string(::getpid());
  std::ifstream children("/proc/" + self + "/task/" + self + "/children");
  if (children) {
    for (pid_t p; children >> p;) out.push_back(p);
    return out;
  }
  // Kernels without CONFIG_PROC_CHILDREN: scan /proc/<pid>/stat, "pid (comm) state ppid ...".
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* e = ::readdir(proc)) {
      const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      if (pid <= 0) continue;
      std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
      const std::string text((std::istreambuf_iterator<char>(stat)),
                             std::istreambuf_iterator<char>());
      const auto close_paren = text.rfind(')');
      if (close_paren == std::string::npos) continue;
      char state = 0;
      long ppid = 0;
      if (std::sscanf(text.c_str() + close_paren + 1, " %c %ld", &state, &ppid) == 2 &&
          ppid == ::getpid()) {
        out.push_back(pid);
      }
    }
    ::closedir(proc);
  }
#endif
  return out;
}

namespace {

// Signal handlers only write the signal number here; the main loop polls the read end.
int signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  (void)!::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

signal_setup::signal_setup() {
  ::sigprocmask(SIG_SETMASK, nullptr, &original_mask_);
  const fd_pair p = make_pipe();
  signal_pipe[0] = p.read;
  signal_pipe[1] = p.write;
  set_nonblocking(p.read);
  set_nonblocking(p.write);  // a full pipe drops the byte; the main loop is awake anyway
  for (std::size_t i = 0; i < managed.size(); ++i) {
    const int sig = managed[i];
    ::sigaction(sig, nullptr, &original_[i]);
    struct sigaction sa {};
    sigemptyset(&sa.sa_mask);
    if (sig == SIGPIPE) {
      sa.sa_handler = SIG_IGN;  // a closed stdout is an error to handle, not a reason to die
    } else if (sig != SIGCHLD && original_[i].sa_handler == SIG_IGN) {
      continue;
    } else {
      sa.sa_handler = on_signal;
      sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    }
    ::sigaction(sig, &sa, nullptr);
  }
}

signal_setup::~signal_setup() {
  restore();
  close_fd(signal_pipe[0]);
  close_fd(signal_pipe[1]);
}

int signal_setup::fd() const noexcept { return signal_pipe[0]; }

void signal_setup::restore() const noexcept {
  for (std::size_t i = 0; i < managed.size(); ++i) {
    ::sigaction(managed[i], &original_[i], nullptr);
  }
  ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
}

}  // namespace distcomm::launcher
