#include "options.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <utility>

#include "distcomm/core/error.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm::bench {

namespace {

// nccl-tests' type names first; DistComm's own accepted as well.
const std::map<std::string, dtype> dtype_names = {
    {"float", dtype::f32}, {"half", dtype::f16}, {"bfloat16", dtype::bf16}, {"double", dtype::f64},
    {"int8", dtype::i8},   {"uint8", dtype::u8}, {"int32", dtype::i32},     {"int64", dtype::i64},
    {"f32", dtype::f32},   {"f16", dtype::f16},  {"bf16", dtype::bf16},     {"f64", dtype::f64},
    {"i8", dtype::i8},     {"u8", dtype::u8},    {"i32", dtype::i32},       {"i64", dtype::i64}};

const std::map<std::string, reduce_op> op_names = {{"sum", reduce_op::sum},
                                                   {"prod", reduce_op::prod},
                                                   {"min", reduce_op::min},
                                                   {"max", reduce_op::max},
                                                   {"avg", reduce_op::avg}};

const std::map<std::string, collective> collective_names = {
    {"allreduce", collective::allreduce}, {"reduce_scatter", collective::reduce_scatter},
    {"allgather", collective::allgather}, {"broadcast", collective::broadcast},
    {"alltoall", collective::alltoall},   {"alltoallv", collective::alltoallv}};

template <class T>
std::vector<std::string> keys(const std::map<std::string, T>& m) {
  std::vector<std::string> k;
  for (const auto& e : m) k.push_back(e.first);
  return k;
}

std::size_t bytes_option(const std::string& text, const char* name) {
  const std::size_t v = parse_bytes(text, name);
  if (v == static_cast<std::size_t>(-1)) {
    throw invalid_argument_error(std::string(name) + ": 'max' is not a buffer size");
  }
  return v;
}

}  // namespace

// Checks across options, as usage errors.
void validate(const options& o) {
  const auto fail = [](const std::string& what) { throw invalid_argument_error(what); };
  if (o.min_bytes > o.max_bytes) {
    fail("invalid sizes for 'minbytes' and 'maxbytes': " + std::to_string(o.min_bytes) + " > " +
         std::to_string(o.max_bytes));
  }
  if (o.step_factor > 1 && o.min_bytes == 0) fail("--stepfactor needs --minbytes above 0");
  if (o.step_factor <= 1 && o.step_bytes == 0)
    fail("--stepbytes must be above 0 when --stepfactor is 1");
  if (o.fusion_tensors > 1 && o.coll != collective::allreduce) {
    fail("--fusion-tensors runs the grouped allreduce: it needs --collective allreduce");
  }
  if (!o.peer.empty()) {
    const bool exchange = o.coll == collective::alltoall || o.coll == collective::alltoallv;
    if (o.coll != collective::allreduce && !(exchange && o.peer == "mpi")) {
      fail(
          "--peer compares allreduce (MPI_Allreduce, gloo::allreduce, ncclAllReduce) and, with "
          "mpi, alltoall "
          "and alltoallv (MPI_Alltoall, MPI_Alltoallv)");
    }
    if ((o.type == dtype::bf16 && o.peer != "nccl") || (o.peer == "mpi" && o.type == dtype::f16)) {
      fail(std::string("--peer ") + o.peer + " has no " + nccl_name(o.type) + " allreduce");
    }
  }
  if (o.pattern == "tp") {
    if (o.coll != collective::allreduce || !o.profile_file.empty() || o.fusion_tensors != 1) {
      fail(
          "--pattern tp repeats one allreduce between computes: it needs --collective allreduce, "
          "no --profile and no --fusion-tensors");
    }
    if (o.floor) fail("--pattern tp times compute with every call; --floor times a bare exchange");
  }
  if (o.floor && !o.profile_file.empty()) {
    fail("--floor is a column of the size sweep; --profile prints its own table");
  }
  if (!o.profile_file.empty() && o.coll != collective::allreduce) {
    fail("--profile times the grouped allreduce: it needs --collective allreduce");
  }
  if (o.gpus_per_thread != 1) {
    fail("-g " + std::to_string(o.gpus_per_thread) +
         ": this benchmark drives one device per rank (nccl-tests' -g 1); start " +
         std::to_string(o.gpus_per_thread) + " times the ranks instead");
  }
  if (o.graph_launches != 0) {
    fail("-G " + std::to_string(o.graph_launches) +
         ": DistComm does not capture its collectives in CUDA graphs (each is launched and "
         "waited for on its own, most on the CPU); leave -G at 0");
  }
}

const char* to_string(collective c) noexcept {
  switch (c) {
    case collective::allreduce:
      return "allreduce";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::allgather:
      return "allgather";
    case collective::broadcast:
      return "broadcast";
    case collective::alltoall:
      return "alltoall";
    case collective::alltoallv:
      return "alltoallv";
  }
  return "invalid";
}

const char* nccl_name(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "half";
    case dtype::bf16:
      return "bfloat16";
    case dtype::f32:
      return "float";
    case dtype::f64:
      return "double";
    case dtype::i8:
      return "int8";
    case dtype::u8:
      return "uint8";
    case dtype::i32:
      return "int32";
    case dtype::i64:
      return "int64";
  }
  return "invalid";
}

std::vector<std::size_t> options::sizes() const {
  std::vector<std::size_t> v;
  for (std::size_t s = min_bytes; s <= max_bytes;) {
    v.push_back(s);
    const std::size_t next = step_factor > 1 ? s * step_factor : s + step_bytes;
    if (next <= s) break;  // overflow
    s = next;
  }
  return v;
}

int parse_options(int argc, char** argv, const command_line& cl, options& out) {
  options o;
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes = "1M";
  std::string type = "float", op = "sum", coll = "allreduce", strategy = "auto";

  CLI::App app{std::string(cl.program) +
               ": DistComm collective sweep in the format of nccl-tests' all_reduce_perf"};
  app.add_option("-b,--minbytes", min_bytes, "Smallest size in bytes (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_bytes, "Largest size in bytes")->capture_default_str();
  app.add_option("-i,--stepbytes", step_bytes, "Size increment when --stepfactor is 1")
      ->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "Size multiplier (1: add --stepbytes)")
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-m,--agg_iters", o.agg_iters,
                 "Collectives per timed iteration, run one after another (nccl-tests groups "
                 "them; DistComm has no group launch); times are per collective")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup_iters,
                 "Warm-up iterations at the largest and "
                 "smallest size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-c,--check", o.check,
                 "Check iterations per size (0: no check), #wrong counts "
                 "the wrong elements")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-o,--op", op, "Reduction")
      ->check(CLI::IsMember(keys(op_names)))
      ->capture_default_str();
  app.add_option("-d,--datatype", type, "Element type")
      ->check(CLI::IsMember(keys(dtype_names)))
      ->capture_default_str();
  app.add_option("-a,--average", o.average, "Time across ranks: 0 rank 0, 1 mean, 2 min, 3 max")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("-N,--run_cycles", o.run_cycles, "Sweeps to run and print (0: forever)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-r,--root", o.root, "Root of broadcast")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-g,--ngpus", o.gpus_per_thread, "Devices per rank (nccl-tests'); only 1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-z,--blocking", o.blocking,
                 "nccl-tests' blocking collectives; DistComm's return once complete, so 0 and 1 "
                 "time the same")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("-G,--cudagraph", o.graph_launches,
                 "CUDA graph launches (nccl-tests'); only 0: DistComm uses no CUDA graphs")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  if (cl.threads_option) {
    app.add_option("-t,--nthreads,--np", o.threads, "Ranks, as threads of this process")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
  }
  app.add_option("--collective", coll, "Collective")
      ->check(CLI::IsMember(keys(collective_names)))
      ->capture_default_str();
  app.add_option("--strategy", strategy, "DistComm strategy: " + join_names(strategies()))
      ->capture_default_str();
  app.add_option("--fusion-tensors", o.fusion_tensors,
                 "Split each size into K tensors and run the grouped (fused) allreduce in place")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--json", o.json_file, "Also write the results to this JSON file (rank 0)");
  app.add_option("--csv", o.csv_file, "Also write the results to this CSV file (rank 0)");
  auto* peer = app.add_option("--peer", o.peer,
                              "Interleave the raw library's own allreduce at every size: mpi "
                              "(MPI_Allreduce on MPI_COMM_WORLD; needs mpirun) or gloo "
                              "(gloo::allreduce); nccl (ncclAllReduce) in distcomm-bench-nccl")
                   ->check(CLI::IsMember({"mpi", "gloo", "nccl"}));
  // Still parsed where it cannot work, so that the program refuses it saying why; not offered.
  if (!cl.peer_option) peer->group("");
  app.add_flag("--floor", o.floor,
               "Interleave a cache-line ping-pong between the two ranks (2 ranks on one host) at "
               "every size: the round trip no exchange between them can beat, and ours as a "
               "multiple of it");
  app.add_option("--pattern", o.pattern,
                 "sweep: the collective alone (nccl-tests'); tp: tensor parallelism's, each call "
                 "after --compute-us of compute on the rank's core, times including it (calls per "
                 "second = 1e6 / time)")
      ->check(CLI::IsMember({"sweep", "tp"}))
      ->capture_default_str();
  app.add_option("--compute-us", o.compute_us, "--pattern tp: compute before each call, us")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--profile", o.profile_file,
                 "Gradient set (one tensor element count per line): time one step fused, "
                 "unfused per tensor and as one flat buffer instead of the size sweep")
      ->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
    o.min_bytes = bytes_option(min_bytes, "--minbytes");
    o.max_bytes = bytes_option(max_bytes, "--maxbytes");
    o.step_bytes = bytes_option(step_bytes, "--stepbytes");
    o.type = dtype_names.at(type);
    o.op = op_names.at(op);
    o.coll = collective_names.at(coll);
    o.strategy = find_strategy(strategy).name;
    validate(o);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const invalid_argument_error& e) {
    std::fprintf(stderr, "%s: %s\nRun with --help for more information.\n", cl.program, e.what());
    return 2;
  }
  out = std::move(o);
  return -1;
}

}  // namespace distcomm::bench
