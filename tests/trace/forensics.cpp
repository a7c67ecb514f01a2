// distcomm-test-forensics: every rank loops over an allreduce (f32 x 4096, sum) and a broadcast
// (i32 x 16 from rank 0); at iteration --at the --victim rank stages one failure:
//   kill   SIGKILL to itself before the allreduce
//   stop   SIGSTOP to itself before the allreduce (the launcher kills it in the end)
//   skip   skips the allreduce (its next collective is the broadcast)
//   size   calls the allreduce with twice the elements
//   lag    sleeps --lag seconds (longer than DISTCOMM_TIMEOUT) before the allreduce
//   hang   sleeps --lag seconds before the allreduce; the driver sends SIGUSR1 meanwhile
// The first error a rank gets is printed and ends it (exit 1); with DISTCOMM_DUMP_DIR set, the
// failing collective has written the rank's flight recorder. tests/trace/forensics.sh checks
// what distcomm-trace makes of the dumps.
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
  CLI::App app{"stages one failure for distcomm-trace"};
  std::string scenario;
  int victim = 2, at = 10, iterations = 20;
  double lag = 8.0;
  app.add_option("--scenario", scenario, "kill, stop, skip, size, lag or hang")
      ->required()
      ->check(CLI::IsMember({"kill", "stop", "skip", "size", "lag", "hang"}));
  app.add_option("--victim", victim, "The rank that fails");
  app.add_option("--at", at, "The iteration it fails in");
  app.add_option("--iterations", iterations, "Iterations in all");
  app.add_option("--lag", lag, "Seconds of lag and hang");
  CLI11_PARSE(app, argc, argv);
  // Survivors hold out against the launcher's SIGTERM (sent at the first rank's failure) so
  // that each fails by itself and dumps; the launcher's SIGKILL after its grace still ends them.
  std::signal(SIGTERM, SIG_IGN);
  int rank = -1;
  try {
    dc::any_communicator comm = dc::init();
    rank = comm.rank();
    std::vector<float> grad(4096, 1.0f), twice(8192, 1.0f);
    std::vector<std::int32_t> word(16, 0);
    for (int i = 0; i < iterations; ++i) {
      bool skip = false;
      if (rank == victim && i == at) {
        std::fprintf(stderr, "rank %d: %s at iteration %d\n", rank, scenario.c_str(), i);
        std::fflush(stderr);
        if (scenario == "kill") std::raise(SIGKILL);
        if (scenario == "stop") std::raise(SIGSTOP);
        if (scenario == "lag" || scenario == "hang") {
          std::this_thread::sleep_for(std::chrono::duration<double>(lag));
        }
        skip = scenario == "skip";
        if (scenario == "size") {
          comm.allreduce(dc::view(twice));
          skip = true;
        }
      }
      if (!skip) comm.allreduce(dc::view(grad));
      comm.broadcast(dc::view(word), 0);
    }
    std::printf("rank %d: completed %d iterations\n", rank, iterations);
    return 0;
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", rank, e.what());
    std::fflush(stdout);
    return 1;
  }
}
