// distcomm-trace's reading of the flight recorders (trace/flight_recorder.hpp) that the ranks of
// one job wrote: which collective the ranks diverged on, who never reached it, who is still in
// it, who came late, and whose dump is missing. A library so that tests can feed it dumps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace distcomm::trace_tool {

// One rank's file: distcomm-flight.<rank>.<pid>.json.
struct dump {
  std::string path;
  int rank = -1;
  std::string host;
  long pid = 0;
  std::string reason;
  std::int64_t dumped_us = 0;
  nlohmann::json communicators;  // as written
};

// Reads one file; throws std::runtime_error naming the file and what is wrong with it.
dump read_dump(const std::string& path);
// The dumps of `paths`: files, or directories whose distcomm-flight.*.json files are read. A rank
// with several files (dumped by processes of two jobs) keeps the newest.
std::vector<dump> read_dumps(const std::vector<std::string>& paths);

// The report: a few lines a person can act on. `expected_ranks` (0: the largest communicator's
// size) says how many dumps there should be.
std::string analyse(const std::vector<dump>& dumps, int expected_ranks = 0);

}  // namespace distcomm::trace_tool
