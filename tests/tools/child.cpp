// distcomm-test-child: the program test_launcher starts under distcomm-run. It runs the actions
// on its command line in order; each rank reads its rank from DISTCOMM_RANK (OMPI_COMM_WORLD_RANK
// when distcomm-run --backend mpi had mpirun start it). Output goes straight to the file
// descriptors (no stdio buffer), so what a test sees does not depend on buffering.
//
//   env A,B,...        one stdout line: "A=value B=value" ("<unset>" when a variable is unset)
//   print TEXT         TEXT and a newline on stdout        eprint TEXT   the same on stderr
//   partial TEXT       TEXT on stdout without a newline
//   slow-line TEXT     TEXT and a newline on stdout, one byte per write, 1 ms apart
//   read-stdin         "stdin=<first line>" or "stdin=<eof>" on stdout
//   flood              writes lines to stdout until a write fails (or SIGPIPE ends it)
//   pidfile DIR        writes its pid to DIR/rank<R>.pid
//   grandchild DIR     starts a process (same process group) that writes DIR/grandchild<R>.pid
//                      and sleeps forever; returns once the file exists
//   detached DIR       the same, but the process calls setsid() first: DIR/detached<R>.pid
//   ignore-term        ignores SIGTERM from now on
//   record-signals DIR on SIGINT, SIGTERM or SIGHUP: writes the number to DIR/signal<R>, exits
//   wait-pidfiles DIR N  waits (at most 20 s) until DIR holds N rank*.pid files
//   wait-stopped DIR R waits (at most 20 s) until the process in DIR/rankR.pid is stopped
//   rank-exit R CODE   rank R exits with CODE here       rank-kill R SIG   rank R raises SIG here
//   exit CODE          sleep SECONDS          sleep-forever
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int my_rank = 0;
char signal_file[4096];

void put(int fd, const std::string& s) {
  const char* p = s.data();
  std::size_t n = s.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::_Exit(90);
  put(fd, text);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) std::_Exit(91);
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

void wait_for_file(const std::string& path) {
  for (int i = 0; i < 20000 && !exists(path); ++i) ::usleep(1000);
}

int count_pidfiles(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("rank", 0) == 0 && name.size() > 4 &&
          name.compare(name.size() - 4, 4, ".pid") == 0) {
        ++n;
      }
    }
    ::closedir(d);
  }
  return n;
}

// True when the process is stopped by a signal: state T in /proc/<pid>/stat ("pid (comm) T ...").
bool is_stopped(const std::string& pid) {
  const int fd = ::open(("/proc/" + pid + "/stat").c_str(), O_RDONLY);
  if (fd < 0) return false;
  char text[512];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* paren = std::strrchr(text, ')');
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'T';
}

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

// Forks a process that records its pid in path and sleeps; returns once the file exists.
void start_sleeper(const std::string& path, bool detach) {
  const pid_t pid = ::fork();
  if (pid < 0) std::_Exit(92);
  if (pid == 0) {
    if (detach) ::setsid();
    write_file_atomically(path, std::to_string(::getpid()) + "\n");
    sleep_forever();
  }
  wait_for_file(path);
}

extern "C" void record_signal(int sig) {
  const int fd = ::open(signal_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    char text[16];
    const int n = std::snprintf(text, sizeof text, "%d\n", sig);
    (void)!::write(fd, text, static_cast<std::size_t>(n));
    ::close(fd);
  }
  ::_exit(128 + sig);
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* r = std::getenv("DISTCOMM_RANK")) {
    my_rank = std::atoi(r);
  } else if (const char* o = std::getenv("OMPI_COMM_WORLD_RANK")) {
    my_rank = std::atoi(o);
  }
  const std::string me = std::to_string(my_rank);
  for (int i = 1; i < argc; ++i) {
    const std::string action = argv[i];
    const auto arg = [&]() -> std::string {
      if (i + 1 >= argc) {
        put(2, "distcomm-test-child: " + action + " needs an argument\n");
        std::_Exit(99);
      }
      return argv[++i];
    };
    if (action == "env") {
      const std::string names = arg();
      std::string line;
      std::size_t start = 0;
      while (start <= names.size()) {
        std::size_t comma = names.find(',', start);
        if (comma == std::string::npos) comma = names.size();
        const std::string name = names.substr(start, comma - start);
        const char* v = std::getenv(name.c_str());
        line += (line.empty() ? "" : " ") + name + "=" + (v ? v : "<unset>");
        start = comma + 1;
      }
      put(1, line + "\n");
    } else if (action == "print") {
      put(1, arg() + "\n");
    } else if (action == "eprint") {
      put(2, arg() + "\n");
    } else if (action == "partial") {
      put(1, arg());
    } else if (action == "slow-line") {
      const std::string text = arg() + "\n";
      for (char c : text) {
        put(1, std::string(1, c));
        ::usleep(1000);
      }
    } else if (action == "flood") {
      const std::string line = "flood " + me + "\n";
      while (::write(1, line.data(), line.size()) > 0) {
      }
      return 3;
    } else if (action == "read-stdin") {
      std::string line;
      char c;
      ssize_t n;
      while ((n = ::read(0, &c, 1)) == 1 && c != '\n') line += c;
      put(1, "stdin=" + (line.empty() && n <= 0 ? std::string("<eof>") : line) + "\n");
    } else if (action == "pidfile") {
      write_file_atomically(arg() + "/rank" + me + ".pid", std::to_string(::getpid()) + "\n");
    } else if (action == "grandchild") {
      start_sleeper(arg() + "/grandchild" + me + ".pid", false);
    } else if (action == "detached") {
      start_sleeper(arg() + "/detached" + me + ".pid", true);
    } else if (action == "ignore-term") {
      ::signal(SIGTERM, SIG_IGN);
    } else if (action == "record-signals") {
      std::snprintf(signal_file, sizeof signal_file, "%s/signal%d", arg().c_str(), my_rank);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, record_signal);
    } else if (action == "wait-pidfiles") {
      const std::string dir = arg();
      const int n = std::atoi(arg().c_str());
      for (int t = 0; t < 20000 && count_pidfiles(dir) < n; ++t) ::usleep(1000);
    } else if (action == "wait-stopped") {
      const std::string dir = arg();
      const std::string path = dir + "/rank" + arg() + ".pid";
      wait_for_file(path);
      std::string pid;
      const int fd = ::open(path.c_str(), O_RDONLY);
      char c;
      while (fd >= 0 && ::read(fd, &c, 1) == 1 && c != '\n') pid += c;
      if (fd >= 0) ::close(fd);
      for (int t = 0; t < 20000 && !is_stopped(pid); ++t) ::usleep(1000);
    } else if (action == "rank-exit") {
      const int r = std::atoi(arg().c_str());
      const int code = std::atoi(arg().c_str());
      if (r == my_rank) return code;
    } else if (action == "rank-kill") {
      const int r = std::atoi(arg().c_str());
      const int sig = std::atoi(arg().c_str());
      if (r == my_rank) ::raise(sig);
    } else if (action == "exit") {
      return std::atoi(arg().c_str());
    } else if (action == "sleep") {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg().c_str())));
    } else if (action == "sleep-forever") {
      sleep_forever();
    } else {
      put(2, "distcomm-test-child: unknown action '" + action + "'\n");
      return 99;
    }
  }
  return 0;
}
