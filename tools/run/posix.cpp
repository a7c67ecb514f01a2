#include "posix.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/uio.h>
#endif

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

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

std::string find_program(const std::string& name) {
  const auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return runnable(name) ? name : std::string();
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t begin = 0; begin <= dirs.size();) {
    std::size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end == begin ? "." : dirs.substr(begin, end - begin);
    const std::string candidate = dir + "/" + name;
    if (runnable(candidate)) return candidate;
    begin = end + 1;
  }
  return {};
}

std::string command_output(const std::vector<std::string>& argv, std::chrono::milliseconds limit) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  fd_pair out = make_pipe();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_fd(out.read);
    close_fd(out.write);
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    ::dup2(out.write, STDOUT_FILENO);
    ::dup2(out.write, STDERR_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  close_fd(out.write);
  const auto until = std::chrono::steady_clock::now() + limit;
  std::string text;
  bool finished = false;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{out.read, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the limit passed
    char buf[4096];
    const ssize_t got = ::read(out.read, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      finished = true;  // end of file: it exited (or closed its output)
      break;
    }
    if (text.size() < (64u << 10)) text.append(buf, static_cast<std::size_t>(got));
  }
  close_fd(out.read);
  // End of file may come before the exit (a program that closes its output and goes on): the
  // exit, too, must come before the limit.
  while (finished) {
    const pid_t r = ::waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= until) {
      finished = false;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!finished) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw std::runtime_error("'" + argv.front() + "' did not finish within " +
                             std::to_string(limit.count()) + " ms");
  }
  return text;
}

bool cross_process_reads_work() {
#ifdef __linux__
  static const int probe = 0x5eed;  // the child's copy sits at the same address
  fd_pair ready = make_pipe();
  fd_pair done = make_pipe();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int* fd : {&ready.read, &ready.write, &done.read, &done.write}) close_fd(*fd);
    return false;
  }
  if (pid == 0) {
    close_fd(ready.read);
    close_fd(done.write);  // else the read below would never see end of file
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);  // fails harmlessly without Yama
    const char byte = 1;
    (void)!::write(ready.write, &byte, 1);
    char ignored;
    (void)!::read(done.read, &ignored, 1);  // returns when the parent closes its end
    ::_exit(0);
  }
  close_fd(ready.write);
  close_fd(done.read);
  char byte = 0;
  ssize_t n;
  do {
    n = ::read(ready.read, &byte, 1);
  } while (n < 0 && errno == EINTR);
  int copy = 0;
  iovec local{&copy, sizeof copy};
  iovec remote{const_cast<int*>(&probe), sizeof probe};
  const bool ok =
      n == 1 &&
      ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof copy) &&
      copy == probe;
  close_fd(ready.read);
  close_fd(done.write);
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return ok;
#else
  return false;
#endif
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
      sa.sa_flags = SA_RESTART;  // SIGCHLD also when a rank is stopped or continued
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
