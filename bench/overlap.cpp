// distcomm-bench-overlap: what the engine's overlap of gradient averaging with backward buys. A
// model profile (bench/profiles/) is replayed layer by layer in backward order (last tensor
// first), each layer taking a share of --compute-ms (by parameters, or equal: --split), in two ways
// timed in alternating steps of one job:
//   sync    compute every layer, then ONE grouped allreduce (avg) of all gradients;
//   engine  compute each layer, then hand its gradient to distcomm::engine; wait at the end.
// and, for reference, the grouped allreduce alone (comm) and the compute alone. The compute is
// modelled two ways (--model): `sleep`, a device busy while the rank's CPU is free (the thread
// sleeps, as when a GPU runs backward: the case overlap exists for), and `cpu`, work on the
// rank's own core (a spin), where communication that needs the CPU cannot hide.
//   distcomm-run -np 2 distcomm-bench-overlap --backend gloo --profile bench/profiles/resnet50.txt
//   mpirun -np 2 distcomm-bench-overlap --backend mpi --model cpu
// --compute-ms auto (the default) sets the compute to the measured comm time: the case where
// overlap matters most. Prints medians over --steps of each, and the two ratios the targets are
// stated in: engine / max(compute, comm) and sync / engine.
// --autotune adds a third engine, over its own communicator, with DISTCOMM_AUTOTUNE=1: its search
// runs first (at most --autotune-steps steps), then its steps are timed between the others, and
// its choice is printed by every rank ("rank R autotune: ...") with tuned/engine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/init.hpp"
#include "distcomm/registry/backends.hpp"
#include "options.hpp"

namespace {

namespace dc = distcomm;
using steady = std::chrono::steady_clock;
using ms = std::chrono::duration<double, std::milli>;

struct options {
  std::string backend;
  std::string strategy;
  std::string profile = "bench/profiles/resnet50.txt";
  std::string compute = "auto";
  std::string model = "sleep";
  std::string split = "params";
  double scale = 1.0;
  int steps = 10;
  bool autotune = false;
  int autotune_steps = 400;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Busy for `d` on this core, or asleep for it (a device working while the CPU is free).
void compute(steady::duration d, bool cpu) {
  if (d <= steady::duration::zero()) return;
  if (!cpu) {
    std::this_thread::sleep_for(d);
    return;
  }
  const auto until = steady::now() + d;
  volatile double x = 1.0;
  while (steady::now() < until) {
    for (int i = 0; i < 200; ++i) x = x * 1.0000001 + 1e-9;
  }
}

// The slowest rank's value of `v` (ms), agreed through `comm`.
double slowest(dc::any_communicator& comm, double v) {
  comm.allreduce(dc::view(&v, 1), dc::reduce_op::max);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Step time with the engine's overlap against compute-then-allreduce, same job"};
  app.add_option("--backend", o.backend, "Backend: " + dc::join_names(dc::built_backends()));
  app.add_option("--strategy", o.strategy, "Strategy (default: auto)");
  app.add_option("--profile", o.profile, "Gradient profile (one element count per line)")
      ->capture_default_str();
  app.add_option("--compute-ms", o.compute,
                 "Backward compute per step, ms, spread over the layers by parameters; auto: the "
                 "measured time of the grouped allreduce alone")
      ->capture_default_str();
  app.add_option("--model", o.model, "How compute is modelled: sleep (a busy device) or cpu")
      ->check(CLI::IsMember({"sleep", "cpu"}))
      ->capture_default_str();
  app.add_option("--split", o.split,
                 "How the compute is spread over the layers: params (by parameters) or equal (the "
                 "same for every tensor; closer for convolutions, whose compute is not in their "
                 "parameter count)")
      ->check(CLI::IsMember({"params", "equal"}))
      ->capture_default_str();
  app.add_option("--scale", o.scale, "Multiply every tensor's size by this (0 < scale <= 1)")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Steps of each kind (median reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--autotune", o.autotune,
               "Also time an engine tuned by DISTCOMM_AUTOTUNE (searched first, then interleaved)");
  app.add_option("--autotune-steps", o.autotune_steps, "Most steps the search may take")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<std::size_t> counts = dc::bench::read_profile(o.profile);
    for (auto& c : counts) {
      c = std::max<std::size_t>(1, static_cast<std::size_t>(static_cast<double>(c) * o.scale));
    }
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const dc::config cfg = dc::config::from_env();
    // Two communicators over the job: the engine owns one, the synchronous steps use the other.
    dc::any_communicator sync_comm = dc::init({o.backend, o.strategy, cfg});
    dc::any_communicator engine_comm = dc::init({o.backend, o.strategy, cfg});
    dc::engine eng(engine_comm);
    dc::config tuned_cfg = cfg;
    tuned_cfg.autotune = true;
    std::optional<dc::any_communicator> tuned_comm;
    std::optional<dc::engine> tuned;
    if (o.autotune) {
      tuned_comm.emplace(dc::init({o.backend, o.strategy, tuned_cfg}));
      tuned.emplace(*tuned_comm, tuned_cfg);
    }
    const bool cpu = o.model == "cpu";
    const bool leader = sync_comm.rank() == 0;

    std::vector<std::vector<float>> grads(counts.size());
    std::vector<dc::tensor_view> views;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      grads[i].assign(counts[i], 1.0f);
      views.push_back(dc::view(grads[i]));
    }
    const auto comm_alone = [&] {
      sync_comm.barrier();
      const auto t0 = steady::now();
      sync_comm.allreduce(dc::span<const dc::tensor_view>(views), dc::reduce_op::avg);
      return slowest(sync_comm, ms(steady::now() - t0).count());
    };
    comm_alone();  // warm-up: connections, fusion buffer
    std::vector<double> comm_ms;
    for (int i = 0; i < 3; ++i) comm_ms.push_back(comm_alone());
    const double compute_ms = o.compute == "auto" ? median(comm_ms) : std::stod(o.compute);
    std::vector<steady::duration> layer(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) {
      const double share = o.split == "equal"
                               ? 1.0 / static_cast<double>(counts.size())
                               : static_cast<double>(counts[i]) / static_cast<double>(total);
      layer[i] = std::chrono::duration_cast<steady::duration>(ms(compute_ms * share));
    }
    if (leader) {
      std::printf(
          "# backend %s, strategy %s, %d ranks, %zu tensors, %.1f MiB, compute %.2f ms per step "
          "(%s, split by %s), %d steps each\n",
          sync_comm.backend_name(), sync_comm.strategy_name(), sync_comm.size(), counts.size(),
          static_cast<double>(total) * 4.0 / 1048576.0, compute_ms, o.model.c_str(),
          o.split.c_str(), o.steps);
    }

    // One engine step: each layer's gradient handed over as soon as it is computed.
    std::vector<dc::work> works;
    const auto engine_step = [&](dc::engine& e) {
      sync_comm.barrier();
      const auto t0 = steady::now();
      works.clear();
      for (std::size_t i = counts.size(); i-- > 0;) {
        compute(layer[i], cpu);
        works.push_back(e.allreduce_async("t" + std::to_string(i), views[i], dc::reduce_op::avg));
      }
      for (auto& w : works) w.wait();
      return slowest(sync_comm, ms(steady::now() - t0).count());
    };
    engine_step(eng);  // warm-up: the engine's cache learns the names
    int search_steps = 0;
    if (tuned) {
      // The search, as a trainer's first steps; the ranks stop at the same step.
      for (double done = 0; done == 0 && search_steps < o.autotune_steps; ++search_steps) {
        engine_step(*tuned);
        done = tuned->autotune().done ? 1 : 0;
        sync_comm.allreduce(dc::view(&done, 1), dc::reduce_op::min);
      }
      const auto st = tuned->autotune();
      std::printf(
          "# rank %d autotune: %s%s after %d steps, %d candidates: %.2f ms per step, "
          "%.2f ms at the start\n",
          sync_comm.rank(), st.done ? "" : "(search unfinished) ", st.current.describe().c_str(),
          search_steps, st.current.trials, st.current.step_seconds * 1e3,
          st.current.start_seconds * 1e3);
      std::fflush(stdout);
    }

    std::vector<double> sync_ms, engine_ms, compute_only_ms, tuned_ms;
    for (int step = 0; step < o.steps; ++step) {
      comm_ms.push_back(comm_alone());
      // sync: backward, then one grouped allreduce.
      sync_comm.barrier();
      auto t0 = steady::now();
      for (std::size_t i = counts.size(); i-- > 0;) compute(layer[i], cpu);
      const double c = ms(steady::now() - t0).count();
      sync_comm.allreduce(dc::span<const dc::tensor_view>(views), dc::reduce_op::avg);
      sync_ms.push_back(slowest(sync_comm, ms(steady::now() - t0).count()));
      compute_only_ms.push_back(slowest(sync_comm, c));
      engine_ms.push_back(engine_step(eng));
      if (tuned) tuned_ms.push_back(engine_step(*tuned));
    }
    if (leader) {
      const double cm = median(comm_ms), cp = median(compute_only_ms);
      const double s = median(sync_ms), e = median(engine_ms);
      std::printf("%12s %12s %12s %12s %18s %14s\n", "compute_ms", "comm_ms", "sync_ms",
                  "engine_ms", "engine/max(c,comm)", "sync/engine");
      std::printf("%12.2f %12.2f %12.2f %12.2f %18.3f %14.3f\n", cp, cm, s, e, e / std::max(cp, cm),
                  s / e);
      if (tuned) {
        const double t = median(tuned_ms);
        std::printf("%12s %12s\n%12.2f %12.3f\n", "tuned_ms", "tuned/engine", t, t / e);
      }
      const auto print_stats = [](const char* which, const dc::engine& e) {
        const auto st = e.stats();
        std::printf("# %s: %llu cycles, %llu full exchanges, %llu collectives for %llu tensors\n",
                    which, static_cast<unsigned long long>(st.cycles),
                    static_cast<unsigned long long>(st.full_cycles),
                    static_cast<unsigned long long>(st.collectives),
                    static_cast<unsigned long long>(st.tensors));
      };
      print_stats("engine", eng);
      if (tuned) print_stats("tuned engine (its search included)", *tuned);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-bench-overlap: %s\n", e.what());
    return 1;
  }
  return 0;
}
