// distcomm-test-fault: every rank runs allreduce in a loop (or, with --op recv / recv_any, passes
// its buffer around a ring of messages: isend to the next rank, a receive from the previous one,
// named or from any rank); after --after iterations the --victim rank sends --signal (KILL or
// STOP) to itself (with --during MS, from a second thread MS ms into that call). The survivors
// must notice within DISTCOMM_TIMEOUT: each prints one line, e.g.
//   rank 0: timeout_error after 10.0 s in allreduce 21 (at 1718000000.123): <what()>
// then one saying how the next call on the now unusable communicator failed, and exits with
// the code of that error kind (below). tests/faults/fault.sh checks the lines.
//   distcomm-run -np 3 distcomm-test-fault --backend gloo --victim 1 --signal STOP
//   mpirun -n 3 distcomm-test-fault --backend mpi --victim 1 --signal KILL
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#ifdef DISTCOMM_FAULT_MPI
#include "distcomm/backends/mpi.hpp"
#endif
#ifdef DISTCOMM_FAULT_GLOO
#include "distcomm/backends/gloo.hpp"
#endif
#ifdef DISTCOMM_FAULT_UCX
#include "distcomm/backends/ucx.hpp"
#endif
#ifdef DISTCOMM_FAULT_SHM
#include "distcomm/backends/shm.hpp"
#endif

namespace dc = distcomm;

namespace {

// Exit codes: one per way a survivor can end, so the driver (and a reader of ctest's log) can
// tell them apart without parsing the message.
constexpr int exit_completed = 1;  // the loop ran to its end: the fault went unnoticed
constexpr int exit_timeout = 10;
constexpr int exit_peer_lost = 11;
constexpr int exit_other_distcomm = 12;
constexpr int exit_other = 13;

struct options {
  std::string backend;
  std::string strategy = "ring";
  int victim = 1;
  std::string signal = "KILL";
  std::string op = "allreduce";  // or recv, recv_any: the ring of messages above
  int after = 20;
  double during_ms = -1;  // >= 0: signal from a second thread this long into call `after`
  int iterations = 100000;
  double mib = 2.0;
  bool ignore_sigterm = false;
};

// Wall-clock seconds since the epoch: the driver compares the victim's and the survivors' lines,
// written by different processes of one machine.
double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The error's kind, as the survivors' lines name it, and the exit code that goes with it.
struct error_kind {
  const char* name;
  int exit_code;
};

error_kind kind_of(const std::exception& e) {
  if (dynamic_cast<const dc::timeout_error*>(&e) != nullptr) return {"timeout_error", exit_timeout};
  if (dynamic_cast<const dc::peer_lost_error*>(&e) != nullptr) {
    return {"peer_lost_error", exit_peer_lost};
  }
  if (dynamic_cast<const dc::error*>(&e) != nullptr) {
    return {"distcomm::error", exit_other_distcomm};
  }
  return {"std::exception", exit_other};
}

double seconds_since(dc::clock::time_point start) {
  return std::chrono::duration<double>(dc::clock::now() - start).count();
}

// --during: the victim's signal comes from this thread, `o.during_ms` after its main thread
// entered call `o.after`, so that the fault lands inside a collective (its data phase for a
// buffer of a few MiB) rather than between two.
class signal_during {
 public:
  signal_during(const options& o, int rank, int sig) {
    if (o.during_ms < 0 || rank != o.victim) return;
    thread_ = std::thread([this, &o, rank, sig] {
      std::unique_lock<std::mutex> lock(mutex_);
      entered_.wait(lock, [&] { return in_call_ || done_; });
      if (done_) return;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.during_ms));
      lock.lock();
      const char* where = returned_ ? "after it returned" : "inside it";
      lock.unlock();
      std::fprintf(stderr,
                   "rank %d: sending SIG%s to itself %.1f ms into %s %d, %s (at %.3f)\n", rank,
                   o.signal.c_str(), o.during_ms, o.op.c_str(), o.after, where, wall_now());
      std::fflush(stderr);
      std::raise(sig);
    });
  }
  ~signal_during() {
    if (!thread_.joinable()) return;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    entered_.notify_one();
    thread_.join();
  }
  signal_during(const signal_during&) = delete;
  signal_during& operator=(const signal_during&) = delete;

  bool active() const { return thread_.joinable(); }
  void entering() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      in_call_ = true;
    }
    entered_.notify_one();
  }
  void returned() {
    const std::lock_guard<std::mutex> lock(mutex_);
    returned_ = true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable entered_;
  bool in_call_ = false;
  bool returned_ = false;
  bool done_ = false;
  std::thread thread_;
};

template <class Comm>
int loop(Comm& comm, const options& o) {
  const int rank = comm.rank();
  if (o.ignore_sigterm && rank != o.victim) std::signal(SIGTERM, SIG_IGN);
  std::fprintf(stderr, "rank %d: pid %d\n", rank, static_cast<int>(::getpid()));
  const auto count = static_cast<std::size_t>(o.mib * (1 << 20) / sizeof(float));
  const std::vector<float> in(count, 1.0f);
  std::vector<float> out(count);
  const int sig = o.signal == "STOP" ? SIGSTOP : SIGKILL;
  const int n = comm.size();
  const char* op = o.op.c_str();
  const auto call = [&] {
    if (o.op == "allreduce") {
      comm.allreduce(dc::view(in), dc::view(out));
      return;
    }
    auto sent = comm.isend(dc::view(in), (rank + 1) % n, 7);
    int source = -1;
    if (o.op == "recv_any") {
      comm.recv_any(dc::view(out), &source, 7);
    } else {
      comm.recv(dc::view(out), (rank + n - 1) % n, 7);
    }
    sent.wait();
  };
  signal_during during(o, rank, sig);
  for (int i = 0; i < o.iterations; ++i) {
    const bool fault_now = i == o.after && rank == o.victim;
    if (fault_now && !during.active()) {
      std::fprintf(stderr, "rank %d: sending SIG%s to itself after %d calls of %s (at %.3f)\n",
                   rank, o.signal.c_str(), i, op, wall_now());
      std::fflush(stderr);
      std::raise(sig);
    }
    if (fault_now) during.entering();
    auto start = dc::clock::now();
    try {
      call();
      if (fault_now) during.returned();
    } catch (const std::exception& e) {
      const error_kind kind = kind_of(e);
      std::fprintf(stderr, "rank %d: %s after %.1f s in %s %d (at %.3f): %s\n", rank, kind.name,
                   seconds_since(start), op, i, wall_now(), e.what());
      std::fflush(stderr);
      // The communicator is unusable now: the next call must fail at once, without waiting out
      // another deadline.
      start = dc::clock::now();
      try {
        call();
        std::fprintf(stderr, "rank %d: the next %s succeeded\n", rank, op);
      } catch (const std::exception& next) {
        std::fprintf(stderr, "rank %d: the next %s failed after %.1f s (%s): %s\n", rank, op,
                     seconds_since(start), kind_of(next).name, next.what());
      }
      return kind.exit_code;
    }
  }
  std::fprintf(stderr, "rank %d: all %d calls of %s completed\n", rank, o.iterations, op);
  return o.victim >= 0 && o.victim < comm.size() ? exit_completed : 0;
}

template <class Strategy, class Backend>
int loop_with(Backend backend, const dc::config& cfg, const options& o) {
  dc::communicator<Backend, Strategy> comm(std::move(backend), cfg);
  return loop(comm, o);
}

template <class Backend>
int with_strategy(Backend backend, const dc::config& cfg, const options& o) {
  namespace s = dc::strategy;
  if (o.strategy == "ring") return loop_with<s::ring>(std::move(backend), cfg, o);
  if (o.strategy == "tree") return loop_with<s::tree>(std::move(backend), cfg, o);
  if (o.strategy == "ps") return loop_with<s::parameter_server>(std::move(backend), cfg, o);
  if (o.strategy == "native") {
    if constexpr (dc::has_native_allreduce_v<Backend>) {
      return loop_with<s::native>(std::move(backend), cfg, o);
    } else {
      throw dc::invalid_argument_error("backend '" + std::string(Backend::name) +
                                       "' has no native allreduce");
    }
  }
  return loop_with<s::automatic>(std::move(backend), cfg, o);
}

int run(const options& o) {
  const dc::config cfg = dc::config::from_env();
#ifdef DISTCOMM_FAULT_MPI
  if (o.backend == "mpi") return with_strategy(dc::mpi_backend(), cfg, o);
#endif
#ifdef DISTCOMM_FAULT_GLOO
  if (o.backend == "gloo") {
    dc::gloo_options go;
    go.timeout = cfg.timeout;
    return with_strategy(dc::gloo_backend(dc::bootstrap(cfg), go), cfg, o);
  }
#endif
#ifdef DISTCOMM_FAULT_UCX
  if (o.backend == "ucx") {
    return with_strategy(dc::ucx_backend(dc::bootstrap(cfg), cfg.timeout), cfg, o);
  }
#endif
#ifdef DISTCOMM_FAULT_SHM
  if (o.backend == "shm") {
    dc::shm_options so;
    so.timeout = cfg.timeout;
    return with_strategy(dc::shm_backend(dc::bootstrap(cfg), so), cfg, o);
  }
#endif
  throw dc::invalid_argument_error("backend '" + o.backend + "' is not built");
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"DistComm fault test: allreduce in a loop until one rank kills or stops itself"};
  app.add_option("--backend", o.backend, "Transport")
      ->required()
      ->check(CLI::IsMember({"mpi", "gloo", "ucx", "shm"}));
  app.add_option("--strategy", o.strategy, "Allreduce algorithm")
      ->check(CLI::IsMember({"auto", "ring", "tree", "ps", "native"}));
  app.add_option("--victim", o.victim, "Rank that signals itself (-1: none)");
  app.add_option("--signal", o.signal, "Signal the victim sends itself")
      ->check(CLI::IsMember({"KILL", "STOP"}));
  app.add_option("--after", o.after, "Allreduces before the signal")->check(CLI::NonNegativeNumber);
  app.add_option("--during", o.during_ms,
                 "Send the signal from a second thread this many ms into allreduce number --after "
                 "instead of before it (inside the collective)")
      ->check(CLI::Range(0.0, 60000.0));
  app.add_option("--op", o.op,
                 "What each iteration calls: allreduce, or a ring of messages with a named "
                 "receive (recv) or one from any rank (recv_any)")
      ->check(CLI::IsMember({"allreduce", "recv", "recv_any"}));
  app.add_option("--iterations", o.iterations, "Calls in all")->check(CLI::PositiveNumber);
  app.add_option("--mib", o.mib, "Buffer size in MiB (f32)")->check(CLI::Range(0.001, 1024.0));
  app.add_flag("--ignore-sigterm", o.ignore_sigterm,
               "Survivors ignore SIGTERM, so a launcher that stops the job at the first failure "
               "does not end them before they report what their backend saw (its SIGKILL after "
               "the grace period still does)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-test-fault: %s\n", e.what());
    return exit_other;
  }
}
