// distcomm-bench-kernels: throughput of the reduction kernels (combine, divide) on arrays far
// larger than the caches, next to the plain loop a[i] += b[i] compiled with -O3 -march=native in
// this file: the loop /work/shared/peers/membw.c uses as the machine's bandwidth reference.
// Bytes are counted as membw counts them: 3N for a[i] += b[i] and c[i] = a[i] + b[i] (read a,
// read b, write a or c), 2N for divide, N being the bytes of one array. GB = 1e9 bytes.
// Each benchmark also runs on 1 MiB arrays, which stay in cache: that shows compute throughput
// (what bounds the f16/bf16 conversions) rather than memory bandwidth.
//
// Defaults: 9 repetitions, randomly interleaved across benchmarks (the machine is noisy; a slow
// phase then hits every benchmark alike), medians reported. Any --benchmark_* flag overrides them.
// The last lines compare the medians: "combine f32 sum: X GB/s, a[i]+=b[i]: Y GB/s, ratio Z%".
// "read another process" is process_vm_readv of a child's array (the shm backend's single copy).
// "copy, N threads" is memcpy on 64 MiB arrays, each thread its own pair, all at once (2N counted
// per thread, summed): with one thread per rank it bounds what an allreduce of the processes on
// this host can reach, as measured now (bench/figures.sh runs it beside shm's figures each round:
// this VM's memory bandwidth moved between 16 and 56 GB/s from day to day).
// (Google Benchmark's own bytes_per_second column is in binary units: its "G/s" is GiB/s.)
#include <benchmark/benchmark.h>
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/core/reduce.hpp"

namespace {

using distcomm::dtype;
using distcomm::reduce_op;

constexpr std::size_t big_bytes = std::size_t{64} << 20;   // per array: far beyond any LLC
constexpr std::size_t small_bytes = std::size_t{1} << 20;  // per array: 3 arrays fit in L2

struct free_deleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// Three page-aligned arrays of one size, first-touched (so no page faults are timed) and kept for
// the whole run: interleaved repetitions then measure the same memory.
struct arrays {
  std::unique_ptr<void, free_deleter> a, b, c;
};

arrays& arrays_of(std::size_t bytes) {
  static std::map<std::size_t, arrays> cache;
  arrays& set = cache[bytes];
  if (!set.a) {
    for (auto* p : {&set.a, &set.b, &set.c}) {
      void* mem = std::aligned_alloc(4096, bytes);
      if (mem == nullptr) std::abort();
      std::memset(mem, 0, bytes);
      p->reset(mem);
    }
  }
  return set;
}

// Fill with values that stay normal through many in-place additions (no denormal slow paths).
void fill(void* p, std::size_t bytes, dtype t, float value) {
  const std::size_t n = bytes / distcomm::dtype_size(t);
  switch (t) {
    case dtype::f32:
      std::fill_n(static_cast<float*>(p), n, value);
      break;
    case dtype::f64:
      std::fill_n(static_cast<double*>(p), n, static_cast<double>(value));
      break;
    case dtype::f16:
      std::fill_n(static_cast<distcomm::f16*>(p), n, distcomm::f16(value));
      break;
    case dtype::bf16:
      std::fill_n(static_cast<distcomm::bf16*>(p), n, distcomm::bf16(value));
      break;
    default:
      std::memset(p, 1, bytes);
  }
}

// The reference loops, written as plainly as in membw.c.
__attribute__((noinline)) void baseline_add(float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; i++) a[i] += b[i];
}

__attribute__((noinline)) void baseline_add3(float* c, const float* a, const float* b,
                                             std::size_t n) {
  for (std::size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}

enum class placement { in_place, out_of_place };

void bm_combine(benchmark::State& state, dtype t, reduce_op op, placement where) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays& m = arrays_of(bytes);
  fill(m.a.get(), bytes, t, 1.0f);
  fill(m.b.get(), bytes, t, 0.0f);  // keeps in-place sums from growing to Inf
  const std::size_t n = bytes / distcomm::dtype_size(t);
  void* dst = where == placement::in_place ? m.a.get() : m.c.get();
  for (auto _ : state) {
    distcomm::combine(dst, m.a.get(), m.b.get(), n, t, op);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * bytes));
}

void bm_divide(benchmark::State& state, dtype t) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays& m = arrays_of(bytes);
  fill(m.a.get(), bytes, t, 1.0f);
  const std::size_t n = bytes / distcomm::dtype_size(t);
  for (auto _ : state) {
    distcomm::divide(m.c.get(), m.a.get(), n, t, 3);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

void bm_baseline_add(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays& m = arrays_of(bytes);
  fill(m.a.get(), bytes, dtype::f32, 1.0f);
  fill(m.b.get(), bytes, dtype::f32, 0.0f);
  auto* a = static_cast<float*>(m.a.get());
  const auto* b = static_cast<const float*>(m.b.get());
  for (auto _ : state) {
    baseline_add(a, b, bytes / sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * bytes));
}

void bm_baseline_add3(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays& m = arrays_of(bytes);
  fill(m.a.get(), bytes, dtype::f32, 1.0f);
  fill(m.b.get(), bytes, dtype::f32, 0.0f);
  for (auto _ : state) {
    baseline_add3(static_cast<float*>(m.c.get()), static_cast<const float*>(m.a.get()),
                  static_cast<const float*>(m.b.get()), bytes / sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 3 * bytes));
}

// memcpy, one pair of arrays per thread (the threads run at once; Google Benchmark sums bytes).
void bm_copy(benchmark::State& state) {
  // By size and thread, filled by thread 0 before the others start.
  static std::map<std::pair<std::size_t, int>, arrays> per_thread;
  static std::mutex mu;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays* m = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mu);
    arrays& set = per_thread[{bytes, state.thread_index()}];
    for (auto* p : {&set.a, &set.b}) {
      if (*p) continue;
      void* mem = std::aligned_alloc(4096, bytes);
      if (mem == nullptr) std::abort();
      std::memset(mem, 1, bytes);
      p->reset(mem);
    }
    m = &set;
  }
  for (auto _ : state) {
    std::memcpy(m->b.get(), m->a.get(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

// process_vm_readv from a child process's copy of the arrays, one thread (2N counted, as memcpy):
// what the shm backend's single copy (DISTCOMM_SHM_SINGLE_COPY=on) reads a peer's buffer at, to
// set beside "copy" at the same size.
void bm_read_peer(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  arrays m;
  for (auto* p : {&m.a, &m.b}) {
    void* mem = std::aligned_alloc(4096, bytes);
    if (mem == nullptr) std::abort();
    std::memset(mem, 1, bytes);
    p->reset(mem);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    std::memset(m.a.get(), 2, bytes);  // its own pages, not the parent's shared ones
    for (;;) ::pause();                // until killed
  }
  if (child < 0) {
    state.SkipWithError("fork failed");
    return;
  }
  ::usleep(100000);  // the child has written its pages
  bool failed = false;
  for (auto _ : state) {
    iovec local{m.b.get(), bytes};
    iovec remote{m.a.get(), bytes};
    if (::process_vm_readv(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes)) {
      failed = true;
      break;
    }
    benchmark::ClobberMemory();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  if (failed) {
    state.SkipWithError("process_vm_readv refused (seccomp, or Yama's ptrace_scope)");
    return;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

const char* const name_combine_in_place = "combine f32 sum in place (dst==a)";
const char* const name_baseline_add = "baseline a[i]+=b[i] f32";
const char* const name_combine_out_of_place = "combine f32 sum out of place";
const char* const name_baseline_add3 = "baseline c[i]=a[i]+b[i] f32";

void register_benchmarks() {
  auto reg = [](const char* name, auto fn, auto... args) {
    return benchmark::RegisterBenchmark(name, fn, args...)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  for (std::size_t bytes : {big_bytes, small_bytes}) {
    const auto arg = static_cast<std::int64_t>(bytes);
    reg(name_combine_in_place, bm_combine, dtype::f32, reduce_op::sum, placement::in_place)
        ->Arg(arg);
    reg(name_baseline_add, bm_baseline_add)->Arg(arg);
    reg(name_combine_out_of_place, bm_combine, dtype::f32, reduce_op::sum, placement::out_of_place)
        ->Arg(arg);
    reg(name_baseline_add3, bm_baseline_add3)->Arg(arg);
    reg("combine f64 sum in place", bm_combine, dtype::f64, reduce_op::sum, placement::in_place)
        ->Arg(arg);
    reg("combine f16 sum in place", bm_combine, dtype::f16, reduce_op::sum, placement::in_place)
        ->Arg(arg);
    reg("combine bf16 sum in place", bm_combine, dtype::bf16, reduce_op::sum, placement::in_place)
        ->Arg(arg);
  }
  reg("copy", bm_copy)->Arg(static_cast<std::int64_t>(big_bytes))->Threads(1)->Threads(2);
  reg("copy", bm_copy)->Arg(static_cast<std::int64_t>(small_bytes));
  for (std::size_t bytes : {big_bytes, small_bytes}) {
    reg("read another process (process_vm_readv)", bm_read_peer)
        ->Arg(static_cast<std::int64_t>(bytes));
  }
  reg("divide f32 by 3", bm_divide, dtype::f32)->Arg(static_cast<std::int64_t>(big_bytes));
  reg("divide f16 by 3", bm_divide, dtype::f16)->Arg(static_cast<std::int64_t>(big_bytes));
}

// Console output as usual, plus the median bytes/s of every benchmark for the summary.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  // Colours only on a terminal, so redirected output stays plain text.
  summary_reporter() : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const auto it = run.counters.find("bytes_per_second");
      if (run.error_occurred || it == run.counters.end()) continue;
      const std::string name = run.run_name.function_name + "/" + run.run_name.args +
                               (run.threads > 1 ? "/threads:" + std::to_string(run.threads) : "");
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") medians_[name] = it->second.value;
      } else {
        samples_[name].push_back(it->second.value);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // Median bytes/s of a benchmark, or 0 when it did not run (filtered out).
  double median(const std::string& name) const {
    if (const auto it = medians_.find(name); it != medians_.end()) return it->second;
    const auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return 0;
    std::vector<double> v = it->second;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  }

 private:
  std::map<std::string, double> medians_;
  std::map<std::string, std::vector<double>> samples_;
};

void print_ratio(const summary_reporter& r, const char* label, const char* ours,
                 const char* baseline_label, const char* baseline) {
  const std::string suffix = "/" + std::to_string(big_bytes);
  const double x = r.median(ours + suffix) / 1e9;
  const double y = r.median(baseline + suffix) / 1e9;
  if (x <= 0 || y <= 0) return;
  std::printf("%s: %.2f GB/s, %s: %.2f GB/s, ratio %.0f%% (medians, %zu MiB per array)\n", label, x,
              baseline_label, y, 100.0 * x / y, big_bytes >> 20);
}

}  // namespace

int main(int argc, char** argv) {
  // Defaults first: flags given on the command line come later and win.
  std::vector<char*> args = {argv[0]};
  char repetitions[] = "--benchmark_repetitions=9";
  char interleave[] = "--benchmark_enable_random_interleaving=true";
  char aggregates[] = "--benchmark_report_aggregates_only=true";
  char min_time[] = "--benchmark_min_time=0.2";
  for (char* flag : {repetitions, interleave, aggregates, min_time}) args.push_back(flag);
  args.insert(args.end(), argv + 1, argv + argc);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  register_benchmarks();
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  print_ratio(reporter, "combine f32 sum", name_combine_in_place, "a[i]+=b[i]", name_baseline_add);
  print_ratio(reporter, "combine f32 sum out of place", name_combine_out_of_place, "c[i]=a[i]+b[i]",
              name_baseline_add3);
  for (int threads : {1, 2}) {
    const std::string name = "copy/" + std::to_string(big_bytes) +
                             (threads > 1 ? "/threads:" + std::to_string(threads) : "");
    if (const double v = reporter.median(name); v > 0) {
      std::printf("copy, %d thread%s: %.2f GB/s (median, %zu MiB per array, 2N counted)\n", threads,
                  threads > 1 ? "s" : "", v / 1e9, big_bytes >> 20);
    }
  }
  return 0;
}
