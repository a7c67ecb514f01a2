// What the autotuner chose (autotune/tuner.hpp), as DISTCOMM_AUTOTUNE_FILE holds it:
//   {"format": "distcomm-autotune 1", "backend": "shm", "strategy": "automatic", "ranks": 2,
//    "fusion_threshold": 16777216, "fusion_cutoff": 65536, "segment_bytes": 262144,
//    "algo": "rd:0-16K;tree:16K-64K;ring:64K-max", "cycle_ms": 1,
//    "step_seconds": 0.152, "start_seconds": 0.160, "trials": 17}
// and, made on a hierarchical communicator (hierarchical.hpp), "hierarchical_threshold": 262144.
// A choice holds for the backend, strategy and world size it was made on; another job's file is
// reported and not used.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distcomm/config.hpp"

namespace distcomm::autotune {

struct choice {
  std::string backend;
  std::string strategy;
  int ranks = 0;
  tuning settings;
  double cycle_ms = 1;
  double step_seconds = 0;   // the choice's measured step
  double start_seconds = 0;  // the starting point's
  int trials = 0;            // candidates measured

  // "fusion threshold 16M, cut-off 64K, segment 256K, table rd:0-16K;ring:16K-max, cycle 1 ms"
  std::string describe() const;
  // Why this choice does not fit a job of `backend`, `strategy` and `ranks`; empty when it does.
  std::string mismatch(const std::string& backend, const std::string& strategy, int ranks) const;
};

// One candidate the search measured.
struct trial {
  std::vector<double> point;  // one value per parameter of the search (search.hpp)
  double seconds = 0;         // per step, the slowest rank's
};

// Where the engine's autotuner stands (engine::autotune()).
struct status {
  bool active = false;  // searching, or a saved choice in use
  bool done = false;    // the search has ended or a saved choice was loaded
  bool loaded = false;  // from DISTCOMM_AUTOTUNE_FILE
  choice current;       // the settings in use now (the choice once done)
  std::vector<trial> trials;
};

std::string to_json(const choice& c);
// invalid_argument_error naming `source` (the file) and what is wrong.
choice from_json(const std::string& text, const std::string& source);

// Reads `file`: nullopt when it does not exist; invalid_argument_error when it cannot be read.
std::optional<std::string> read_file(const std::string& file);
// Writes the choice to `file` through a temporary file in the same directory (never half a file);
// error naming the file when it cannot.
void save(const choice& c, const std::string& file);

}  // namespace distcomm::autotune
