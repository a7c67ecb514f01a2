// Output of the benchmarks, on rank 0: nccl-tests' text layout (header, one row per size with
// out-of-place and in-place time/algbw/busbw/#wrong, footer), DistComm's additions (the peer's
// columns and ours/peer ratio, the --floor column, the --profile table), and the same results as
// --json / --csv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "options.hpp"

namespace distcomm::bench {

// One column group of a row.
struct measurement {
  bool ran = false;         // false: not applicable (printed N/A)
  double time_us = 0;       // per collective, combined across ranks as -a says
  double algbw = 0;         // GB/s
  double busbw = 0;         // GB/s
  std::int64_t wrong = -1;  // wrong elements over all ranks; -1: not checked
};

struct row {
  int cycle = 0;
  std::size_t bytes = 0;
  std::size_t count = 0;
  int root = -1;
  measurement out_of_place, in_place, peer;
  double floor_us = 0;  // --floor: one cache-line round trip (floor.hpp); 0: not timed
};

// One mode of --profile.
struct profile_row {
  std::string mode;  // fused, unfused, flat, peer-<name>
  std::size_t tensors = 0;
  std::size_t collectives = 0;  // per step
  measurement m;
};

// Facts about the run printed in the header and stored with the results.
struct run_info {
  std::string program;   // distcomm-bench-gloo
  std::string backend;   // gloo
  std::string strategy;  // the strategy type's name: ring, tree, ..., automatic
  int ranks = 1;
  int threads = 1;          // ranks per process (local backend: all of them)
  std::string peer;         // "" or "mpi" / "gloo"
  std::string peer_detail;  // "MPI_Allreduce on MPI_COMM_WORLD"
  bool floor = false;       // --floor: the floor column
  std::size_t fusion_threshold = 0;
  std::vector<std::string> devices;  // one "Rank .. Pid .. on host .." line per rank
};

// "Rank  0 Group  0 Pid  1234 on       host backend gloo": nccl-tests' device line, adapted.
std::string device_line(int rank, const std::string& backend);
// nccl-tests' bus bandwidth factor for `ranks`.
double bus_factor(collective c, int ranks) noexcept;
// nccl-tests' time format: 2 decimals below 100 us, 1 below 10 ms, none above.
std::string format_time(double us);

class report {
 public:
  report(const options& o, run_info info);

  void header();
  void add(const row& r);  // prints it
  void profile_header(const std::string& file, std::size_t tensors, std::size_t elements);
  void add(const profile_row& r);
  // "# Out of bounds values" and "# Avg bus bandwidth" lines; writes --json / --csv.
  void finish();
  // Checks that found wrong elements (nccl-tests counts them the same way).
  int errors() const noexcept { return errors_; }

 private:
  void count(const measurement& m, bool ours);
  void write_json() const;
  void write_csv() const;

  options o_;
  run_info info_;
  std::vector<row> rows_;
  std::vector<profile_row> profile_;
  std::string profile_file_;
  int errors_ = 0;
  double busbw_sum_ = 0;
  int busbw_n_ = 0;
  double peer_busbw_sum_ = 0;
  int peer_busbw_n_ = 0;
};

}  // namespace distcomm::bench
