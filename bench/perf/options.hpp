// Command line of the distcomm-bench-<backend> executables: nccl-tests' all_reduce_perf options
// (same letters, long names and defaults) plus DistComm's own (collective, strategy, fusion,
// peer, output files). Parsed with CLI11; every rank parses the same argv.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/sim/step.hpp"

namespace distcomm::bench {

enum class collective { allreduce, reduce_scatter, allgather, broadcast, alltoall, alltoallv };

const char* to_string(collective c) noexcept;
// nccl-tests' spelling of a dtype ("float", "half", "bfloat16", ...).
const char* nccl_name(dtype t) noexcept;

struct options {
  // nccl-tests defaults: one 32 MiB size.
  std::size_t min_bytes = std::size_t{32} << 20;
  std::size_t max_bytes = std::size_t{32} << 20;
  std::size_t step_bytes = std::size_t{1} << 20;
  std::size_t step_factor = 1;  // > 1: multiply, else add step_bytes
  int iters = 20;
  int agg_iters = 1;  // collectives per timed iteration, one after another (-m)
  int warmup_iters = 5;
  int check = 1;       // check iterations per size (0: no check)
  int average = 1;     // 0 rank 0, 1 mean, 2 min, 3 max across ranks
  int run_cycles = 1;  // 0: forever
  int root = 0;        // broadcast
  reduce_op op = reduce_op::sum;
  dtype type = dtype::f32;
  collective coll = collective::allreduce;
  std::string strategy = "auto";  // as the strategy registry spells it
  std::size_t fusion_tensors = 1;
  std::string json_file;
  std::string csv_file;
  std::string peer;    // "", "mpi" or "gloo"
  bool floor = false;  // --floor: time a cache-line ping-pong (floor.hpp) at every size
  // --pattern tp: tensor parallelism's traffic, each call after `compute_us` of compute on the
  // rank's core (a layer's matmul between its two allreduces); every column's time includes it.
  std::string pattern = "sweep";
  double compute_us = 20.0;
  std::string profile_file;
  int threads = 2;  // ranks of the local backend (threads of one process)
  // nccl-tests options accepted for its scripts; validate() refuses what DistComm cannot do.
  int gpus_per_thread = 1;  // -g: one device per rank only
  int blocking = 0;         // -z: DistComm's collectives return once complete either way
  int graph_launches = 0;   // -G: no CUDA graphs

  // The sizes one cycle visits, in bytes, as nccl-tests steps through them.
  std::vector<std::size_t> sizes() const;
};

// What an executable offers beyond the common options.
struct command_line {
  const char* program;      // "distcomm-bench-gloo"
  bool threads_option;      // -t/--nthreads/--np (the local backend)
  bool peer_option = true;  // --peer in --help (one rank per process, host memory)
};

// Parses argv into `out`. Returns -1 to go on, else the exit code: 0 after --help, non-zero after
// a usage error (printed on stderr).
int parse_options(int argc, char** argv, const command_line& cl, options& out);
// Throws invalid_argument_error for options that do not go together, or that ask for what
// DistComm does not do (parse_options calls it).
void validate(const options& o);

// Reads a --profile gradient set (the cost model's reader, sim/step.hpp).
using sim::read_profile;

}  // namespace distcomm::bench
