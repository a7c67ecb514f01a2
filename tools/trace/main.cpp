// distcomm-trace: reads the flight recorders the ranks of a job wrote into DISTCOMM_DUMP_DIR
// (trace/flight_recorder.hpp) and says which collective the ranks diverged on, which ranks never
// reached it, are still inside it or came late, what each was doing instead, and whose dumps are
// missing; given the ranks' timeline files too (DISTCOMM_TIMELINE), the last span each recorded.
//   DISTCOMM_DUMP_DIR=/tmp/dumps distcomm-run -np 4 ./trainer    # a rank fails, every rank dumps
//   distcomm-trace /tmp/dumps
//   kill -USR1 <pids of a stuck job>; distcomm-trace /tmp/dumps   # a job that hangs
//   distcomm-trace /tmp/dumps --timeline /tmp/timeline.*.json     # DISTCOMM_TIMELINE's files
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "timelines.hpp"
#include "verdict.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "DistComm hang forensics: which collective the ranks diverged on, and which ranks were "
      "behind, from the flight recorders in DISTCOMM_DUMP_DIR"};
  std::vector<std::string> paths;
  int ranks = 0;
  app.add_option("paths", paths,
                 "Dump directories (their distcomm-flight.*.json files) or dump files")
      ->required();
  std::vector<std::string> timelines;
  app.add_option("-t,--timeline", timelines,
                 "Timeline files of the same job (DISTCOMM_TIMELINE): each rank's last span, "
                 "against its dump");
  app.add_option("-n,--ranks", ranks,
                 "Ranks in the job (default: the size of its largest communicator); ranks "
                 "without a dump are named")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto dumps = distcomm::trace_tool::read_dumps(paths);
    std::fputs(distcomm::trace_tool::analyse(dumps, ranks).c_str(), stdout);
    if (!timelines.empty()) {
      std::vector<distcomm::trace_tool::timeline_file> read;
      for (const std::string& t : timelines) read.push_back(distcomm::trace_tool::read_timeline(t));
      std::fputs(distcomm::trace_tool::describe_timelines(read, dumps).c_str(), stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-trace: %s\n", e.what());
    return 2;
  }
}
