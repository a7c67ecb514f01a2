#include "job.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "output.hpp"
#include "posix.hpp"

extern char** environ;

namespace distcomm::launcher {
namespace {

using steady = std::chrono::steady_clock;

// After SIGKILL, how long to wait for the kernel to take the processes away before giving up with
// a warning (a process in uninterruptible sleep can take a while; the launcher must still end).
constexpr std::chrono::seconds kill_wait{5};
// Poll period while stopping, or while processes the ranks started are being swept up: group
// members that are not our children do not wake us when they exit.
constexpr std::chrono::milliseconds stop_tick{20};

// ---- small helpers ------------------------------------------------------------------------------

// One line on stderr, written with one call so it never splits another writer's line.
void say(const std::string& text) {
  const std::string line = "distcomm-run: " + text + "\n";
  (void)write_all(STDERR_FILENO, line.data(), line.size());
}

// "1 rank", "3 ranks", "2 processes".
std::string plural(std::size_t n, const std::string& noun) {
  const char* ending = n == 1 ? "" : noun.back() == 's' ? "es" : "s";
  return std::to_string(n) + " " + noun + ending;
}

// "rank 3" or "ranks 0, 1, 3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string seconds_text(std::chrono::duration<double> d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", d.count());
  return buf;
}

struct signal_entry {
  int number;
  const char* name;
};

// The signals a rank is likely to die of or be stopped by, or distcomm-run to forward.
constexpr signal_entry signal_names[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
    {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGCONT, "SIGCONT"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"},
};

std::string signal_name(int sig) {
  for (const auto& s : signal_names) {
    if (s.number == sig) return s.name;
  }
  return "signal " + std::to_string(sig);
}

// ---- the supervisor -----------------------------------------------------------------------------

struct output_stream {
  int fd = -1;      // read end of the rank's pipe; -1 once closed
  int target = -1;  // the launcher's fd its tagged lines go to
  line_tagger tagger;
};

struct rank_process {
  pid_t pid = -1;              // also the id of its process group
  bool running = false;        // started and not reaped yet
  bool stopped = false;        // stopped by a signal (SIGSTOP, SIGTSTP, ...) and not continued
  bool stop_reported = false;  // its first stop was reported (later ones are not)
  bool group_empty = false;    // nothing is left in its process group (checked after it exited)
  std::vector<output_stream> streams;
};

class supervisor {
 public:
  supervisor(const job_options& o, const std::vector<environment>& envs,
             const signal_setup& signals)
      : o_(o), envs_(envs), signals_(signals), ranks_(envs.size()) {
    devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull_ < 0) throw std::system_error(errno, std::generic_category(), "/dev/null");
    // A background process group that reads the terminal is stopped (SIGTTIN), so a terminal
    // stays with the launcher; a file or pipe on stdin goes to rank 0, as with mpirun.
    stdin_to_rank0_ = ::fcntl(STDIN_FILENO, F_GETFD) != -1 && !::isatty(STDIN_FILENO);
#ifdef __linux__
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
    // --tag-output holds two pipes per rank; raise the soft descriptor limit if they would not
    // fit (the ranks get the original limit back).
    ::getrlimit(RLIMIT_NOFILE, &original_nofile_);
    const rlim_t needed = o.tag_output ? 2 * static_cast<rlim_t>(envs.size()) + 64 : 0;
    if (original_nofile_.rlim_cur != RLIM_INFINITY && original_nofile_.rlim_cur < needed) {
      rlimit raised = original_nofile_;
      raised.rlim_cur = std::min(needed, original_nofile_.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &raised);
    }
  }

  // Last resort (an exception left run()): nothing the job started may outlive the launcher.
  ~supervisor() {
    for (auto& r : ranks_) {
      if (alive(r)) ::killpg(r.pid, SIGKILL);
      for (auto& s : r.streams) close_fd(s.fd);
    }
    for (pid_t p : own_children()) ::kill(p, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    close_fd(devnull_);
  }
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  int run() {
    start_ = steady::now();
    for (std::size_t r = 0; r < ranks_.size() && !stopping_; ++r) spawn(static_cast<int>(r));
    for (;;) {
      reap();
      const auto now = steady::now();
      if (!stopping_ && o_.timeout.count() > 0 && now - start_ >= o_.timeout) on_timeout();
      if (stopping_ && !kill_sent_ && now >= kill_at_) escalate();
      if (stopping_) signal_stragglers();
      if (running_count() == 0) {
        if (!anything_left()) break;
        if (!stopping_) {
          sweep_leftovers();
          continue;
        }
      }
      if (kill_sent_ && now >= give_up_at_) {
        say("some processes of the job did not go away within " + seconds_text(kill_wait) +
            " of SIGKILL; giving up on them");
        break;
      }
      wait_for_events(now);
    }
    drain_outputs();
    return exit_code_;
  }

 private:
  // ---- starting ----

  void spawn(int rank) {
    rank_process& r = ranks_[static_cast<std::size_t>(rank)];
    std::vector<char*> argv;
    for (const auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const auto& e : envs_[static_cast<std::size_t>(rank)].entries()) {
      envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);

    fd_pair report = make_pipe();  // the child writes errno here when exec fails
    fd_pair out, err;
    if (o_.tag_output) {
      out = make_pipe();
      err = make_pipe();
    }
    const int in = rank == 0 && stdin_to_rank0_ ? STDIN_FILENO : devnull_;

    // Block every signal across fork so that no handler of ours runs in the child before exec.
    sigset_t all, old;
    sigfillset(&all);
    ::sigprocmask(SIG_SETMASK, &all, &old);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) exec_child(argv, envp, parent, in, out.write, err.write, report.write);
    const int fork_errno = errno;
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    close_fd(report.write);
    close_fd(out.write);
    close_fd(err.write);
    if (pid < 0) {
      close_fd(report.read);
      close_fd(out.read);
      close_fd(err.read);
      say("cannot start rank " + std::to_string(rank) + ": fork: " + std::strerror(fork_errno));
      fail_to_start(exit_internal_error);
      return;
    }
    ::setpgid(pid, pid);  // the child does it too: whichever runs first wins the race
    r.pid = pid;
    r.running = true;
    if (o_.tag_output) {
      const std::string tag = "[" + std::to_string(rank) + "] ";
      r.streams.push_back({out.read, STDOUT_FILENO, line_tagger(tag)});
      r.streams.push_back({err.read, STDERR_FILENO, line_tagger(tag)});
      for (auto& s : r.streams) set_nonblocking(s.fd);
    }

    int child_errno = 0;
    ssize_t n;
    do {
      n = ::read(report.read, &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    close_fd(report.read);
    if (n == static_cast<ssize_t>(sizeof child_errno)) {
      say("cannot start '" + o_.command.front() + "'" +
          (o_.launcher.empty() ? " for rank " + std::to_string(rank) : std::string()) + ": " +
          std::strerror(child_errno));
      fail_to_start(child_errno == ENOENT ? exit_not_found : exit_cannot_execute);
    }
  }

  // In the child, between fork and exec: only async-signal-safe work, no allocation.
  [[noreturn]] void exec_child(const std::vector<char*>& argv, const std::vector<char*>& envp,
                               pid_t parent, int in, int out, int err, int report) const {
    ::setpgid(0, 0);
#ifdef __linux__
    // Should the launcher itself be SIGKILLed, the kernel ends the rank.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(exit_internal_error);  // it died before prctl
#else
    (void)parent;
#endif
    signals_.restore();
    ::setrlimit(RLIMIT_NOFILE, &original_nofile_);
    if (in != STDIN_FILENO) ::dup2(in, STDIN_FILENO);
    if (out >= 0) ::dup2(out, STDOUT_FILENO);
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    environ = const_cast<char**>(envp.data());
    ::execvp(argv[0], argv.data());
    const int e = errno;
    (void)write_all(report, reinterpret_cast<const char*>(&e), sizeof e);
    ::_exit(e == ENOENT ? exit_not_found : exit_cannot_execute);
  }

  void fail_to_start(int code) {
    exit_code_ = code;
    begin_stop(SIGTERM);
  }

  // ---- watching ----

  // "rank 3", "ranks 0, 2", or the launcher's name when it is the one process started.
  std::string ranks_text(const std::vector<int>& ranks) const {
    return o_.launcher.empty() ? rank_list(ranks) : o_.launcher;
  }
  // "3 ranks", or the launcher's name.
  std::string count_text(std::size_t n) const {
    return o_.launcher.empty() ? plural(n, "rank") : o_.launcher;
  }

  // Started, and it or something in its process group may still be running.
  static bool alive(const rank_process& r) { return r.pid > 0 && (r.running || !r.group_empty); }

  std::size_t running_count() const {
    return static_cast<std::size_t>(std::count_if(ranks_.begin(), ranks_.end(),
                                                  [](const rank_process& r) { return r.running; }));
  }

  std::vector<int> running_ranks() const {
    std::vector<int> out;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running) out.push_back(static_cast<int>(i));
    }
    return out;
  }

  // The rank whose running process is pid, or -1.
  int rank_of(pid_t pid) const {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running && ranks_[i].pid == pid) return static_cast<int>(i);
    }
    return -1;
  }

  std::vector<pid_t> orphans() const {
    std::vector<pid_t> out = own_children();
    out.erase(std::remove_if(out.begin(), out.end(), [&](pid_t p) { return rank_of(p) >= 0; }),
              out.end());
    return out;
  }

  // Collects every child that ended (ranks, and orphans of the job re-parented to the launcher)
  // and notes ranks that were stopped or continued. Stops are handled before the exits collected
  // in the same round, so that the line about a failure can say which ranks are stopped.
  void reap() {
    std::vector<std::pair<int, int>> exits;  // rank, wait status
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (pid <= 0) {
        if (pid < 0 && errno == EINTR) continue;
        break;
      }
      const int rank = rank_of(pid);
      if (rank < 0) continue;  // an orphan
      rank_process& r = ranks_[static_cast<std::size_t>(rank)];
      if (WIFSTOPPED(status)) {
        on_rank_stopped(rank, WSTOPSIG(status));
      } else if (WIFCONTINUED(status)) {
        r.stopped = false;
      } else {
        r.running = false;
        exits.emplace_back(rank, status);
      }
    }
    for (const auto& [rank, status] : exits) on_rank_exit(rank, status);
  }

  // A stopped rank neither runs nor exits: the job may wait for it silently until some deadline,
  // so say so. Once per rank: tools that pause processes again and again (cpulimit, a debugger)
  // would repeat the line.
  void on_rank_stopped(int rank, int sig) {
    rank_process& r = ranks_[static_cast<std::size_t>(rank)];
    r.stopped = true;
    if (r.stop_reported) return;
    r.stop_reported = true;
    std::string what = ranks_text({rank}) + " (pid " + std::to_string(r.pid) +
                       ") was stopped by signal " + std::to_string(sig) + " (" + signal_name(sig) +
                       ")";
    if (sig == SIGTTIN || sig == SIGTTOU) what += ", for using the terminal from the background";
    if (!stopping_) what += "; the job cannot finish until it is continued or ended";
    say(what);
  }

  // " (rank 1 is stopped; SIGCONT follows the SIGTERM)" when running ranks are stopped, else "".
  std::string stopped_note(int sig) const {
    std::vector<int> stopped;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (ranks_[i].running && ranks_[i].stopped) stopped.push_back(static_cast<int>(i));
    }
    if (stopped.empty()) return {};
    return " (" + ranks_text(stopped) + (stopped.size() == 1 ? " is" : " are") +
           " stopped; SIGCONT follows the " + signal_name(sig) + ")";
  }

  void on_rank_exit(int rank, int status) {
    // Once the job is stopping, exits are its consequence, not new failures.
    if (stopping_ || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) return;
    std::string what = ranks_text({rank});
    int code = 0;
    if (WIFSIGNALED(status)) {
      code = exit_signal_base + WTERMSIG(status);
      what += " was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
              signal_name(WTERMSIG(status)) + ")";
    } else {
      code = WEXITSTATUS(status);
      what += " exited with code " + std::to_string(code);
    }
    if (exit_code_ == 0) exit_code_ = code;  // the first failure's (--elastic: later ones go on)
    const std::size_t others = running_count();
    if (o_.elastic) {
      // The survivors go on.
      if (others > 0) what += "; the other " + plural(others, "rank") + " go on (--elastic)";
      say(what);
      return;
    }
    if (others > 0) {
      what += "; stopping the other " + plural(others, "rank") + stopped_note(SIGTERM);
    }
    say(what);
    begin_stop(SIGTERM);
  }

  // True while a rank, a member of a rank's process group or an orphan of the job is alive.
  bool anything_left() {
    bool left = running_count() > 0;
    for (auto& r : ranks_) {
      if (r.pid <= 0 || r.running || r.group_empty) continue;
      if (::killpg(r.pid, 0) == 0 || errno == EPERM) {
        left = true;
      } else {
        // Never signal this group again: its id may now be reused.
        r.group_empty = true;
      }
    }
    return left || !orphans().empty();
  }

  void on_timeout() {
    exit_code_ = exit_timeout;
    const std::vector<int> running = running_ranks();
    say("job did not finish within " + seconds_text(o_.timeout) + " (--timeout); killed " +
        (running.empty() ? std::string("the processes its ranks started") : ranks_text(running)) +
        stopped_note(SIGTERM));
    begin_stop(SIGTERM);
  }

  void on_signal_received(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs at the top of every round
    if (!stopping_) {
      exit_code_ = exit_signal_base + sig;
      say("received " + signal_name(sig) + "; forwarding it to " + count_text(running_count()) +
          stopped_note(sig));
      begin_stop(sig);
    } else if (!kill_sent_) {
      say("received " + signal_name(sig) + " while stopping; sending SIGKILL");
      kill_sent_ = true;
      give_up_at_ = steady::now() + kill_wait;
      signal_stragglers();
    }
  }

  // Every rank has exited, but processes they started have not: stop those too (the exit code
  // stays the ranks').
  void sweep_leftovers() {
    std::vector<int> groups;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (alive(ranks_[i])) groups.push_back(static_cast<int>(i));
    }
    std::string who = groups.empty() ? std::string() : "processes started by " + ranks_text(groups);
    std::size_t loose = 0;  // orphans that left their rank's process group (setsid)
    for (pid_t p : orphans()) {
      const pid_t group = ::getpgid(p);
      loose += std::none_of(ranks_.begin(), ranks_.end(),
                            [&](const rank_process& r) { return r.pid == group; });
    }
    if (loose > 0) who += (who.empty() ? "" : " and ") + plural(loose, "detached process");
    say((o_.launcher.empty() ? std::string("every rank") : o_.launcher) + " has exited but " + who +
        " are still running; stopping them");
    begin_stop(SIGTERM);
  }

  void begin_stop(int sig) {
    stopping_ = true;
    stop_signal_ = sig;
    kill_at_ = steady::now() + std::chrono::duration_cast<steady::duration>(o_.grace);
    for (auto& r : ranks_) {
      if (!alive(r)) continue;
      ::killpg(r.pid, sig);
      ::killpg(r.pid, SIGCONT);  // a stopped process only acts on the signal once continued
    }
    signal_stragglers();
  }

  // Orphans appear while the job stops (their parent died): give each the current signal once;
  // after the grace period, SIGKILL everything still there on every round.
  void signal_stragglers() {
    if (kill_sent_) {
      for (auto& r : ranks_) {
        if (alive(r)) ::killpg(r.pid, SIGKILL);
      }
      for (pid_t p : orphans()) ::kill(p, SIGKILL);
      return;
    }
    for (pid_t p : orphans()) {
      if (signalled_.insert(p).second) {
        ::kill(p, stop_signal_);
        ::kill(p, SIGCONT);
      }
    }
  }

  void escalate() {
    const bool left = anything_left();  // also marks the groups that emptied
    std::vector<int> stuck;
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      if (alive(ranks_[i])) stuck.push_back(static_cast<int>(i));
    }
    if (left) {
      say((stuck.empty() ? std::string("processes started by the job") : ranks_text(stuck)) +
          " did not stop within " + seconds_text(o_.grace) + " of " + signal_name(stop_signal_) +
          " (--grace); sending SIGKILL");
    }
    kill_sent_ = true;
    give_up_at_ = steady::now() + kill_wait;
    signal_stragglers();
  }

  // ---- waiting and output ----

  void wait_for_events(steady::time_point now) {
    std::vector<pollfd> fds;
    fds.push_back({signals_.fd(), POLLIN, 0});
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
      }
    }
    steady::time_point until = steady::time_point::max();
    if (stopping_ || running_count() == 0) {
      until = now + stop_tick;
    } else if (o_.timeout.count() > 0) {
      until = start_ + std::chrono::duration_cast<steady::duration>(o_.timeout);
    }
    if (stopping_ && !kill_sent_) until = std::min(until, kill_at_);
    int ms = -1;
    if (until != steady::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
      ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    if (::poll(fds.data(), fds.size(), ms) < 0) {
      if (errno == EINTR) return;
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n;
      while ((n = ::read(signals_.fd(), sigs, sizeof sigs)) > 0) {
        for (ssize_t i = 0; i < n; ++i) on_signal_received(sigs[i]);
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (output_stream* s = stream_of(fds[i].fd)) pump(*s);
    }
  }

  output_stream* stream_of(int fd) {
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (s.fd == fd) return &s;
      }
    }
    return nullptr;
  }

  enum class pumped { data, empty, closed };

  // One read from a rank's pipe (one per round keeps a chatty rank from starving the others).
  pumped pump(output_stream& s) {
    char buf[64 << 10];
    ssize_t n;
    do {
      n = ::read(s.fd, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      emit(s.target, s.tagger.feed(buf, static_cast<std::size_t>(n)));
      return pumped::data;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return pumped::empty;
    emit(s.target, s.tagger.flush());
    close_fd(s.fd);
    return pumped::closed;
  }

  // Writes tagged lines. When the launcher's own output is gone (`distcomm-run ... | head`), the
  // ranks' pipes to it are closed too, so that their next write fails (SIGPIPE) just as it would
  // without --tag-output, instead of the launcher draining them forever.
  void emit(int target, const std::string& text) {
    if (text.empty() || write_all(target, text.data(), text.size())) return;
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        if (s.target == target) close_fd(s.fd);
      }
    }
  }

  // Every process is gone, so every pipe is at end of file (unless a process outside the job was
  // handed one); read what is left and flush unfinished last lines.
  void drain_outputs() {
    for (auto& r : ranks_) {
      for (auto& s : r.streams) {
        // Stop at `empty` too: a writer outside the job still holds the pipe; do not wait for it.
        while (s.fd >= 0 && pump(s) == pumped::data) {
        }
        if (s.fd >= 0) {
          emit(s.target, s.tagger.flush());
          close_fd(s.fd);
        }
      }
    }
  }

  const job_options& o_;
  const std::vector<environment>& envs_;
  const signal_setup& signals_;
  std::vector<rank_process> ranks_;
  int devnull_ = -1;
  bool stdin_to_rank0_ = false;
  rlimit original_nofile_{};
  steady::time_point start_;

  int exit_code_ = 0;  // decided by the first event: a failure, a signal, the timeout
  bool stopping_ = false;
  int stop_signal_ = SIGTERM;
  steady::time_point kill_at_;
  bool kill_sent_ = false;
  steady::time_point give_up_at_;
  std::set<pid_t> signalled_;
};

}  // namespace

int run_job(const job_options& options, const std::vector<environment>& envs) {
  if (options.command.empty() || envs.empty()) {
    throw std::invalid_argument("run_job: no program or no ranks");
  }
  signal_setup signals;
  supervisor s(options, envs, signals);
  return s.run();
}

}  // namespace distcomm::launcher
