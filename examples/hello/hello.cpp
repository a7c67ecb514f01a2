// distcomm-hello: every rank contributes rank+1 to an allreduce and checks the sum.
//   distcomm-hello --np 4 --strategy ring --count 1000000     ranks as threads (local backend)
//   distcomm-run -np 2 distcomm-hello --backend gloo          one rank per process
//   mpirun -np 2 distcomm-hello --backend mpi                 or: distcomm-run --backend mpi -np 2
// Under a launcher each process is one rank. gloo and ucx meet through distcomm::bootstrap(); mpi
// takes MPI_COMM_WORLD and needs no store. The local backend has no transport between processes,
// so under a launcher it computes the sum through the bootstrap store instead.
// The backend defaults to DISTCOMM_BACKEND (set by distcomm-run --backend), else local.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#ifdef DISTCOMM_HAVE_MPI
#include "distcomm/backends/mpi.hpp"
#endif
#ifdef DISTCOMM_HAVE_GLOO
#include "distcomm/backends/gloo.hpp"
#endif
#ifdef DISTCOMM_HAVE_UCX
#include "distcomm/backends/ucx.hpp"
#endif

namespace {

// The backends this build can run (the umbrella target links every one that was built).
const std::vector<std::string> built_backends = {
    "local",
#ifdef DISTCOMM_HAVE_MPI
    "mpi",
#endif
#ifdef DISTCOMM_HAVE_GLOO
    "gloo",
#endif
#ifdef DISTCOMM_HAVE_UCX
    "ucx",
#endif
};

struct options {
  std::string backend;  // empty: DISTCOMM_BACKEND, else local
  std::string strategy = "auto";
  std::size_t count = 1024;
  int np = 4;
};

std::mutex print_mu;

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Returns true when every element equals 1 + 2 + ... + size.
template <class Strategy, class Backend>
bool hello(Backend backend, const options& o, const distcomm::config& cfg) {
  distcomm::communicator<Backend, Strategy> comm(std::move(backend), cfg);
  std::vector<double> data(o.count, comm.rank() + 1.0);
  comm.allreduce(distcomm::view(data), distcomm::reduce_op::sum);
  const double expected = comm.size() * (comm.size() + 1) / 2.0;
  bool ok = true;
  for (double v : data) ok = ok && v == expected;
  std::lock_guard<std::mutex> lk(print_mu);
  std::printf("rank %d/%d: sum=%g %s (backend %s, strategy %s, %zu x f64)\n", comm.rank(),
              comm.size(), data.empty() ? expected : data.front(), ok ? "ok" : "WRONG",
              Backend::name, o.strategy.c_str(), o.count);
  std::fflush(stdout);  // under a launcher, one line per rank as soon as it is known
  return ok;
}

// make() builds the backend, after the strategy was checked: a strategy the backend cannot run
// is reported before any connection is made.
template <class Make>
bool hello_with(Make&& make, const options& o, const distcomm::config& cfg) {
  using backend = decltype(make());
  namespace s = distcomm::strategy;
  if (o.strategy == "ring") return hello<s::ring>(make(), o, cfg);
  if (o.strategy == "tree") return hello<s::tree>(make(), o, cfg);
  if (o.strategy == "ps") return hello<s::parameter_server>(make(), o, cfg);
  if (o.strategy == "rd") return hello<s::recursive_doubling>(make(), o, cfg);
  if (o.strategy == "native") {
    if constexpr (distcomm::has_native_allreduce_v<backend>) {
      return hello<s::native>(make(), o, cfg);
    } else {
      throw distcomm::invalid_argument_error(
          std::string("--strategy native: the ") + backend::name +
          " backend has no native allreduce; use auto, ring, tree or ps");
    }
  }
  return hello<s::automatic>(make(), o, cfg);
}

// Ranks as threads of this process.
bool hello_threads(const options& o, const distcomm::config& cfg) {
  bool all_ok = true;
  std::mutex mu;
  distcomm::local_world world(o.np);
  world.run([&](distcomm::local_backend b) {
    const bool ok = hello_with([&] { return std::move(b); }, o, cfg);
    std::lock_guard<std::mutex> lk(mu);
    all_ok = all_ok && ok;
  });
  return all_ok;
}

// One rank of a multi-process job with the local backend: meet through the store, add rank+1,
// read the total.
bool hello_through_store(const distcomm::config& cfg) {
  distcomm::job j = distcomm::bootstrap(cfg);
  const distcomm::world_info& w = j.world;
  std::int64_t sum = w.rank + 1;
  if (j.kv) {
    j.kv->add("hello/sum", w.rank + 1);
    distcomm::store_barrier(*j.kv, "hello/added", w.rank, w.size);
    sum = j.kv->add("hello/sum", 0);
  }
  const std::int64_t expected = static_cast<std::int64_t>(w.size) * (w.size + 1) / 2;
  std::printf("rank %d/%d: sum=%lld %s (launcher %s, through the store)\n", w.rank, w.size,
              static_cast<long long>(sum), sum == expected ? "ok" : "WRONG",
              distcomm::to_string(w.launcher));
  return sum == expected;
}

// One rank of a multi-process job (or a job of one) with a real transport.
bool hello_process(const options& o, const distcomm::config& cfg) {
#ifdef DISTCOMM_HAVE_MPI
  // MPI_COMM_WORLD is the world: no store, so no master address is needed (multi-node mpirun).
  if (o.backend == "mpi") return hello_with([] { return distcomm::mpi_backend(); }, o, cfg);
#endif
#ifdef DISTCOMM_HAVE_GLOO
  if (o.backend == "gloo") {
    const auto make = [&] {
      distcomm::gloo_options go;
      go.timeout = cfg.timeout;
      return distcomm::gloo_backend(distcomm::bootstrap(cfg), go);
    };
    return hello_with(make, o, cfg);
  }
#endif
#ifdef DISTCOMM_HAVE_UCX
  if (o.backend == "ucx") {
    const auto make = [&] { return distcomm::ucx_backend(distcomm::bootstrap(cfg), cfg.timeout); };
    return hello_with(make, o, cfg);
  }
#endif
  (void)cfg;
  throw distcomm::invalid_argument_error("backend '" + o.backend + "' is not built in");
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"DistComm hello: each rank contributes rank+1 to an allreduce and checks the sum"};
  app.add_option(
         "--backend", o.backend,
         "Transport (default: DISTCOMM_BACKEND, else local); built: " + join(built_backends))
      ->check(CLI::IsMember(built_backends));
  app.add_option("--strategy", o.strategy, "Allreduce algorithm")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "ring", "tree", "ps", "rd", "native"}));
  app.add_option("--count", o.count, "Elements per rank (f64)")->capture_default_str();
  app.add_option("--np", o.np, "Ranks as threads of this process (local backend only)")
      ->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  try {
    const distcomm::config cfg = distcomm::config::from_env();
    if (o.backend.empty()) {
      o.backend = cfg.backend.empty() ? "local" : cfg.backend;
      if (std::find(built_backends.begin(), built_backends.end(), o.backend) ==
          built_backends.end()) {
        throw distcomm::invalid_argument_error("DISTCOMM_BACKEND=" + o.backend +
                                               " is not built into this distcomm-hello (built: " +
                                               join(built_backends) + "); pass --backend");
      }
    }
    bool ok = false;
    if (o.backend != "local") {
      if (app.count("--np") != 0) {
        throw distcomm::invalid_argument_error(
            "--np runs ranks as threads, which only the local backend can; start " + o.backend +
            " ranks as processes: distcomm-run -np N distcomm-hello --backend " + o.backend);
      }
      ok = hello_process(o, cfg);
    } else if (app.count("--np") == 0 &&
               distcomm::detect_world().launcher != distcomm::launcher_kind::none) {
      ok = hello_through_store(cfg);  // started by a launcher and not asked for threads
    } else {
      ok = hello_threads(o, cfg);
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-hello: %s\n", e.what());
    return 2;
  }
}
