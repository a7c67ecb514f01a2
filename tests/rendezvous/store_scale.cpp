// distcomm-test-store-scale: the start-up of a large job's store, with ranks as threads of a few
// processes on loopback. The parent hosts a tcp_store_server for the job (its world size and a
// token); optionally holds --flood sockets open to it without a handshake, from the ranks' own
// address or another (--flood-from), before any rank starts; then starts --procs processes
// (itself again), which run the ranks as threads.
// Each rank connects (with the token), sets its key, meets the others in a store_barrier, reads
// its two ring neighbours' keys (what a backend's connection exchange does) and meets them once
// more. Prints
//   store scale: N ranks in K processes (F sockets without a handshake held open, R of them
//   refused): S s
// and exits 0 when every rank did all of it, 1 otherwise (each failure printed). With --server
// PATH the store is a distcomm-store process (PATH) instead of the parent's own.
//
//   distcomm-test-store-scale --ranks 4096 --procs 4 [--flood 2000 [--flood-from 127.0.0.2]]
//                             [--timeout 120] [--phases] [--server PATH]
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "store_process.hpp"

namespace dc = distcomm;

namespace {

std::string text(const dc::bytes& b) { return std::string(b.begin(), b.end()); }
dc::bytes bytes_of(const std::string& s) { return dc::bytes(s.begin(), s.end()); }

using steady = std::chrono::steady_clock;
constexpr int phases = 5;
constexpr const char* phase_names[phases] = {"connected", "key set", "first barrier",
                                             "neighbours read", "second barrier"};

// One rank: connect, publish, meet, read the neighbours, meet again, the time at the end of each
// in `at`. "" on success.
std::string run_rank(int port, int rank, int size, double timeout, const std::string& token,
                     steady::time_point* at) {
  try {
    dc::tcp_store kv("127.0.0.1", port, std::chrono::duration<double>(timeout), token,
                     dc::job_identity{size, "scale"});
    at[0] = steady::now();
    kv.set("addr/" + std::to_string(rank), bytes_of("rank " + std::to_string(rank)));
    at[1] = steady::now();
    dc::store_barrier(kv, "published", rank, size);
    at[2] = steady::now();
    for (const int peer : {(rank + 1) % size, (rank + size - 1) % size}) {
      const std::string got = text(kv.get("addr/" + std::to_string(peer)));
      if (got != "rank " + std::to_string(peer)) {
        return "rank " + std::to_string(rank) + " read '" + got + "' for rank " +
               std::to_string(peer);
      }
    }
    at[3] = steady::now();
    dc::store_barrier(kv, "connected", rank, size);
    at[4] = steady::now();
    return {};
  } catch (const std::exception& e) {
    return "rank " + std::to_string(rank) + ": " + e.what();
  }
}

// Ranks first .. first + count - 1 as threads; the number that failed. With `epoch` (the
// parent's start, in steady_clock nanoseconds), prints when the median and the last of these
// ranks finished each phase.
int run_ranks(int port, int first, int count, int size, double timeout, const std::string& token,
              long long epoch) {
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  std::vector<steady::time_point> at(static_cast<std::size_t>(count) * phases);
  for (int r = first; r < first + count; ++r) {
    threads.emplace_back([&, r] {
      const std::string e = run_rank(port, r, size, timeout, token,
                                     &at[static_cast<std::size_t>(r - first) * phases]);
      if (!e.empty()) {
        ++failed;
        std::fprintf(stderr, "store scale: %s\n", e.c_str());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (epoch != 0 && failed.load() == 0) {
    const steady::time_point start{std::chrono::nanoseconds(epoch)};
    for (int ph = 0; ph < phases; ++ph) {
      std::vector<double> s;
      for (int i = 0; i < count; ++i) {
        s.push_back(
            std::chrono::duration<double>(
                at[static_cast<std::size_t>(i) * phases + static_cast<std::size_t>(ph)] - start)
                .count());
      }
      std::sort(s.begin(), s.end());
      std::fprintf(stderr, "store scale: ranks %d-%d: %-15s median %.3f s, last %.3f s\n", first,
                   first + count - 1, phase_names[ph], s[s.size() / 2], s.back());
    }
  }
  return failed.load();
}

// A socket from `from` (an IPv4 loopback address) connected to 127.0.0.1:port that never says
// anything.
int silent_socket(int port, const std::string& from) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  if (fd < 0 || ::inet_pton(AF_INET, from.c_str(), &src.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The start-up of a large job's store, ranks as threads"};
  int ranks = 4096;
  int procs = 4;
  int flood = 0;
  double timeout = 120;
  app.add_option("--ranks", ranks, "world size")->check(CLI::Range(2, 1 << 20));
  app.add_option("--procs", procs, "processes running the ranks")->check(CLI::Range(1, 256));
  app.add_option("--flood", flood, "sockets held open without a handshake")
      ->check(CLI::Range(0, 1 << 20));
  std::string flood_from = "127.0.0.1";
  app.add_option("--flood-from", flood_from,
                 "the loopback address the flood comes from (the ranks' own by default)");
  app.add_option("--timeout", timeout, "every rank's deadline, seconds");
  std::string standalone;
  app.add_option("--server", standalone, "a distcomm-store to run as the job's store");
  bool show_phases = false;
  app.add_flag("--phases", show_phases,
               "print when each process's median and last rank finished each phase (stderr)");
  // A process of ranks, started by the parent (exec'd: a fork of the parent, whose server thread
  // may hold a lock, could not use it).
  int port = 0;
  int first = 0;
  int count = 0;
  app.add_option("--port", port, "(internal) the store to connect to: run ranks only");
  app.add_option("--first", first, "(internal) the first rank to run");
  app.add_option("--count", count, "(internal) how many ranks to run");
  int expect_refused = 0;
  app.add_option("--expect-refused", expect_refused,
                 "fail unless the server refused at least this many of the flood's sockets");
  long long epoch = 0;
  app.add_option("--epoch", epoch, "(internal) the parent's start (steady_clock ns), for --phases");
  CLI11_PARSE(app, argc, argv);
  const std::string token = "store-scale-token-0123456789abcdef";
  if (port != 0) return run_ranks(port, first, count, ranks, timeout, token, epoch) == 0 ? 0 : 1;

  std::unique_ptr<dc::tcp_store_server> own;
  std::unique_ptr<dc::testing::store_process> other;
  if (standalone.empty()) {
    own = std::make_unique<dc::tcp_store_server>("127.0.0.1", 0, token,
                                                 dc::job_identity{ranks, "scale"});
  } else {
    other = std::make_unique<dc::testing::store_process>(
        standalone, token,
        std::vector<std::string>{"--world-size", std::to_string(ranks), "--job-id", "scale"});
  }
  const int store_port = own ? own->port() : other->port();
  std::vector<int> silent;
  // A flood from another address meets a connection of the ranks' address in its handshake, as
  // when it starts while a job connects: the server then holds it to that address's quota.
  if (flood > 0 && flood_from != "127.0.0.1") {
    const int fd = silent_socket(store_port, "127.0.0.1");
    if (fd >= 0) silent.push_back(fd);
  }
  for (int i = 0; i < flood; ++i) {
    const int fd = silent_socket(store_port, flood_from);
    if (fd >= 0) silent.push_back(fd);
  }
  // The flood is in before the first rank: wait until the server has taken what it takes. Those
  // it refused, it has closed.
  std::this_thread::sleep_for(std::chrono::milliseconds(flood > 0 ? 1500 : 0));
  int refused = 0;
  for (const int fd : silent) {
    pollfd p{fd, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP)) != 0) ++refused;
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<pid_t> children;
  for (int k = 0; k < procs; ++k) {
    const int from = static_cast<int>(static_cast<long>(ranks) * k / procs);
    const int to = static_cast<int>(static_cast<long>(ranks) * (k + 1) / procs);
    std::vector<std::string> args = {
        "/proc/self/exe",        "--ranks", std::to_string(ranks),      "--timeout",
        std::to_string(timeout), "--port",  std::to_string(store_port), "--first",
        std::to_string(from),    "--count", std::to_string(to - from)};
    if (show_phases) {
      args.push_back("--epoch");
      args.push_back(std::to_string(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()));
    }
    std::vector<char*> argv_child;
    for (auto& a : args) argv_child.push_back(a.data());
    argv_child.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv_child.data(), environ) != 0) {
      std::fprintf(stderr, "store scale: cannot start a process of ranks\n");
      return 1;
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const int fd : silent) ::close(fd);
  std::printf(
      "store scale: %d ranks in %d processes (%d sockets without a handshake held open, %d of "
      "them refused): %.2f s\n",
      ranks, procs, static_cast<int>(silent.size()), refused, seconds);
  if (failed != 0) std::printf("store scale: %d of %d processes failed\n", failed, procs);
  if (refused < expect_refused) {
    std::printf("store scale: the server refused %d of the flood's sockets, expected at least %d\n",
                refused, expect_refused);
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
