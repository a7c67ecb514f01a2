// distcomm-bench-strategies: allreduce time of every strategy on the local backend (ranks as
// threads), per size and world size; the figures behind strategy::automatic's built-in table.
//   distcomm-bench-strategies --np 2,4,8 --min-bytes 8 --max-bytes 64M --repeats 5
// Prints one row per (np, bytes) with the median microseconds per allreduce of each strategy and
// the fastest one. Strategies run interleaved (one repeat of each in turn) so drift in the
// machine's speed affects all of them alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"

namespace {

namespace dc = distcomm;
using seconds = std::chrono::duration<double>;

struct options {
  std::vector<int> np = {2, 4, 8};
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  int repeats = 5;
  double min_time = 0.05;               // seconds per measurement
  std::vector<std::string> strategies;  // empty: every registered one but auto
  bool deterministic = false;
};

// Seconds per allreduce of `bytes` (f32 sum) with strategy S on p ranks: the slowest rank's time
// for a loop calibrated to last at least min_time.
template <class S>
double time_allreduce(int p, std::size_t bytes, double min_time, bool deterministic) {
  dc::local_world world(p);
  std::vector<double> per_rank(static_cast<std::size_t>(p));
  world.run([&](dc::local_backend b) {
    dc::config c;
    c.ps_servers = 0;
    c.deterministic = deterministic;
    dc::communicator<dc::local_backend, S> comm(std::move(b), c);
    std::vector<float> data(std::max<std::size_t>(1, bytes / 4), 1.0f);
    const auto v = dc::view(data);
    comm.allreduce(v);  // warm up buffers and connections
    // Calibrate on rank 0's clock, then agree on the iteration count through a broadcast.
    int iters = 1;
    for (;;) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) comm.allreduce(v);
      double dt = seconds(std::chrono::steady_clock::now() - t0).count();
      comm.broadcast(dc::view(&dt, 1), 0);
      if (dt >= min_time || iters >= (1 << 20)) {
        per_rank[static_cast<std::size_t>(comm.rank())] = dt / iters;
        break;
      }
      iters *= 2;
    }
  });
  return *std::max_element(per_rank.begin(), per_rank.end());
}

double time_strategy(const std::string& s, int p, std::size_t bytes, const options& o) {
  return dc::visit_strategy<dc::local_backend>(s, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return time_allreduce<S>(p, bytes, o.min_time, o.deterministic);
  });
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Allreduce time of each strategy on the local backend"};
  app.add_option("--np", o.np, "World sizes")->delimiter(',');
  app.add_option("--min-bytes", o.min_bytes, "Smallest buffer (K/M/G suffixes)");
  app.add_option("--max-bytes", o.max_bytes, "Largest buffer");
  app.add_option("--repeats", o.repeats, "Measurements per cell (median reported)");
  app.add_option("--min-time", o.min_time, "Seconds per measurement");
  app.add_option("--strategies", o.strategies,
                 "Strategies (default: all but auto): " + dc::join_names(dc::strategies()))
      ->delimiter(',');
  app.add_flag("--deterministic", o.deterministic, "Run with DISTCOMM_DETERMINISTIC semantics");
  CLI11_PARSE(app, argc, argv);
  try {
    if (o.strategies.empty()) {
      for (const dc::strategy_info& s : dc::strategies()) {
        if (std::string(s.name) != "auto") o.strategies.emplace_back(s.name);
      }
    }
    for (std::string& s : o.strategies) s = dc::find_strategy(s).name;
    const std::size_t lo = dc::parse_bytes(o.min_bytes, "--min-bytes");
    const std::size_t hi = dc::parse_bytes(o.max_bytes, "--max-bytes");
    std::printf("# median us per f32 sum allreduce, local backend, %d repeats%s\n", o.repeats,
                o.deterministic ? ", deterministic" : "");
    std::printf("%4s %12s", "np", "bytes");
    for (const auto& s : o.strategies) std::printf(" %12s", s.c_str());
    std::printf("  fastest\n");
    for (int p : o.np) {
      for (std::size_t bytes = lo; bytes <= hi; bytes *= 4) {
        std::vector<std::vector<double>> t(o.strategies.size());
        for (int rep = 0; rep < o.repeats; ++rep) {
          for (std::size_t i = 0; i < o.strategies.size(); ++i) {
            t[i].push_back(time_strategy(o.strategies[i], p, bytes, o));
          }
        }
        std::printf("%4d %12zu", p, bytes);
        std::size_t best = 0;
        std::vector<double> med;
        for (auto& v : t) {
          std::sort(v.begin(), v.end());
          med.push_back(v[v.size() / 2]);
        }
        for (std::size_t i = 0; i < med.size(); ++i) {
          std::printf(" %12.1f", med[i] * 1e6);
          if (med[i] < med[best]) best = i;
        }
        std::printf("  %s\n", o.strategies[best].c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-bench-strategies: %s\n", e.what());
    return 1;
  }
  return 0;
}
