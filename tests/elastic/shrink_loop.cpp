// distcomm-test-shrink: 4 ranks run an allreduce loop (every rank adds its job rank + 1, so the
// sum says who took part); at --at the --victim rank sends itself SIGKILL or SIGSTOP. The others
// get peer_lost_error or timeout_error, call shrink(), check that they are the 3 survivors ranked
// in order, and finish the loop on the smaller communicator, checking every sum. A stopped victim
// continued later (tests/elastic/shrink.sh sends SIGCONT) fails on its old communicator, calls
// shrink() in turn and must get excluded_error. Lines the driver checks:
//   rank 0: shrunk to rank 0 of 3 (ranks 0, 1, 3 went on) after peer_lost_error
//   rank 0: finished 30 iterations as rank 0 of 3, every sum right
//   rank 2: excluded: shrink: rank 2 was presumed dead ...
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

int main(int argc, char** argv) {
  CLI::App app{"shrink after a lost rank"};
  std::string signal_name = "KILL";
  int victim = 2, at = 5, iterations = 30;
  double window = 2.0, linger = 0.0;
  std::string release;
  app.add_option("--signal", signal_name, "KILL or STOP")->check(CLI::IsMember({"KILL", "STOP"}));
  app.add_option("--victim", victim, "The rank that is lost");
  app.add_option("--at", at, "The iteration it is lost in");
  app.add_option("--iterations", iterations, "Iterations in all");
  app.add_option("--window", window, "Seconds the survivors wait for each other in shrink()");
  app.add_option("--linger", linger, "Seconds the survivors stay after the loop at most");
  app.add_option("--release", release, "A file whose creation ends the survivors' --linger");
  CLI11_PARSE(app, argc, argv);
  std::signal(SIGTERM, SIG_IGN);  // each rank ends by itself (the launcher's SIGKILL still ends it)

  int job_rank = -1;
  try {
    dc::any_communicator comm = dc::init();
    job_rank = comm.rank();
    std::vector<int> members;  // job ranks of comm
    for (int r = 0; r < comm.size(); ++r) members.push_back(r);
    std::vector<float> x(1024);
    int shrinks = 0;
    for (int i = 0; i < iterations;) {
      if (job_rank == victim && i == at) {
        std::fprintf(stderr, "rank %d: SIG%s to itself at iteration %d\n", job_rank,
                     signal_name.c_str(), i);
        std::fflush(stderr);
        std::raise(signal_name == "KILL" ? SIGKILL : SIGSTOP);
      }
      std::fill(x.begin(), x.end(), static_cast<float>(job_rank + 1));
      try {
        comm.allreduce(dc::view(x));
      } catch (const dc::error& e) {
        const bool lost = dynamic_cast<const dc::peer_lost_error*>(&e) != nullptr;
        const bool late = dynamic_cast<const dc::timeout_error*>(&e) != nullptr;
        if (!lost && !late) throw;
        std::printf("rank %d: iteration %d failed: %s\n", job_rank, i, e.what());
        std::fflush(stdout);
        if (++shrinks > 1) throw;
        comm = comm.shrink(std::chrono::duration<double>(window));
        // The survivors, in their old order: find this communicator's job ranks.
        std::vector<int> mine(static_cast<std::size_t>(comm.size()));
        int me = job_rank;
        comm.allgather(dc::view(&me, 1), dc::view(mine));
        members = mine;
        // A rank lost just after its last send may have completed that collective on some
        // survivors only (a killed process's connection resets, dropping what a slower peer had
        // not read yet): the survivors resume from the earliest iteration any of them lacks.
        int resume = i;
        comm.allreduce(dc::view(&resume, 1), dc::reduce_op::min);
        i = resume;
        std::string names;
        for (int r : members) names += (names.empty() ? "" : ", ") + std::to_string(r);
        std::printf("rank %d: shrunk to rank %d of %d (ranks %s went on) after %s\n", job_rank,
                    comm.rank(), comm.size(), names.c_str(),
                    lost ? "peer_lost_error" : "timeout_error");
        std::fflush(stdout);
        continue;  // the same iteration again, on the survivors
      }
      float want = 0;
      for (int r : members) want += static_cast<float>(r + 1);
      for (float v : x) {
        if (v != want) {
          std::printf("rank %d: WRONG SUM at iteration %d: %g, want %g\n", job_rank, i, v, want);
          return 4;
        }
      }
      ++i;
    }
    std::printf("rank %d: finished %d iterations as rank %d of %d, every sum right\n", job_rank,
                iterations, comm.rank(), comm.size());
    std::fflush(stdout);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(linger));
    while (std::chrono::steady_clock::now() < until &&
           (release.empty() || ::access(release.c_str(), F_OK) != 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  } catch (const dc::excluded_error& e) {
    std::printf("rank %d: excluded: %s\n", job_rank, e.what());
    return 3;
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", job_rank, e.what());
    return 1;
  }
}
