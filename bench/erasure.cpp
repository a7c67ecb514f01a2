// distcomm-bench-erasure: what choosing the backend at run time costs. The same allreduce through
// a typed communicator<Backend> and through an any_communicator over the same backend (what
// distcomm::init() returns), both with strategy::automatic, alive in one job and timed in
// alternating blocks, so drift in the machine's speed hits both alike. One strategy only: the
// call path through the erasure is the same for all, and every backend x strategy pair would
// make this one file as costly to compile as the library's init(); the erased one is the
// backend library's (make_communicator()), so only the typed one is compiled here.
//   mpirun -np 2 distcomm-bench-erasure --backend mpi --bytes 8,4K
//   distcomm-run -np 2 distcomm-bench-erasure --backend gloo
// Prints, per size, the median over rounds of each form's mean time per allreduce (slowest rank)
// and the median of the per-round ratios any / typed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/registry/backends.hpp"

namespace {

namespace dc = distcomm;
using seconds = std::chrono::duration<double>;

struct options {
  std::string backend = "mpi";
  std::vector<std::string> sizes = {"8", "4K"};
  int rounds = 21;
  int iters = 2000;  // allreduces per block
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per allreduce of `data` over one block, the slowest rank's (the max is agreed through
// the same communicator after the clock stopped).
template <class Comm>
double block(Comm& comm, std::vector<float>& data, int iters) {
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.allreduce(dc::view(data));
  double dt = seconds(std::chrono::steady_clock::now() - t0).count() / iters;
  comm.allreduce(dc::view(&dt, 1), dc::reduce_op::max);
  return dt;
}

template <class Typed>
void compare(Typed& typed, dc::any_communicator& erased, const options& o) {
  if (typed.rank() == 0) {
    std::printf("# backend %s, strategy %s, %d ranks, f32 sum in place, %d rounds of %d\n",
                erased.backend_name(), erased.strategy_name(), typed.size(), o.rounds, o.iters);
    std::printf("%10s %12s %12s %12s\n", "bytes", "typed_us", "any_us", "any/typed");
  }
  for (const std::string& s : o.sizes) {
    const std::size_t bytes = dc::parse_bytes(s, "--bytes");
    std::vector<float> data(std::max<std::size_t>(1, bytes / sizeof(float)), 0.0f);
    block(typed, data, o.iters);  // warm-up: buffers, connections, caches
    block(erased, data, o.iters);
    std::vector<double> t, a, ratio;
    for (int r = 0; r < o.rounds; ++r) {
      // Alternate which form goes first, so neither always follows the other.
      const bool typed_first = r % 2 == 0;
      const double x = typed_first ? block(typed, data, o.iters) : block(erased, data, o.iters);
      const double y = typed_first ? block(erased, data, o.iters) : block(typed, data, o.iters);
      t.push_back(typed_first ? x : y);
      a.push_back(typed_first ? y : x);
      ratio.push_back(a.back() / t.back());
    }
    if (typed.rank() == 0) {
      std::printf("%10zu %12.3f %12.3f %12.4f\n", data.size() * sizeof(float), median(t) * 1e6,
                  median(a) * 1e6, median(ratio));
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Allreduce through a typed communicator and through any_communicator, same job"};
  app.add_option("--backend", o.backend, "Backend: " + dc::join_names(dc::built_backends()))
      ->capture_default_str();
  app.add_option("--bytes", o.sizes, "Sizes (K/M suffixes)")->delimiter(',');
  app.add_option("--rounds", o.rounds, "Rounds (median reported)")->capture_default_str();
  app.add_option("--iters", o.iters, "Allreduces per block")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const dc::config cfg = dc::config::from_env();
    dc::visit_backend(o.backend, cfg, [&](auto make) {
      using B = decltype(make());
      dc::communicator<B> typed(make(), cfg);
      // What init() returns: the backend library's own communicator (make_communicator()).
      dc::any_communicator erased = make_communicator(make(), "auto", cfg);
      compare(typed, erased, o);
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-bench-erasure: %s\n", e.what());
    return 1;
  }
  return 0;
}
