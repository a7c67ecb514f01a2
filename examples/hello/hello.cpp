// distcomm-hello: every rank contributes rank+1 to an allreduce and checks the sum.
//   distcomm-hello --np 4 --strategy ring --count 1000000     ranks as threads (local backend)
//   distcomm-run -np 2 distcomm-hello --backend gloo          one rank per process
//   mpirun -np 2 distcomm-hello --backend mpi                 or: distcomm-run --backend mpi -np 2
// Under a launcher each process is one rank. gloo and ucx meet through distcomm::bootstrap(); mpi
// takes MPI_COMM_WORLD and needs no store. The local backend has no transport between processes,
// so under a launcher it computes the sum through the bootstrap store instead.
// The backend defaults to DISTCOMM_BACKEND (set by distcomm-run --backend), else local.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/init.hpp"
#include "distcomm/registry/backends.hpp"

namespace {

struct options {
  std::string backend;  // empty: DISTCOMM_BACKEND, else local
  std::string strategy = "auto";
  std::size_t count = 1024;
  int np = 4;
};

std::mutex print_mu;

// Returns true when every element equals 1 + 2 + ... + size.
bool hello(distcomm::any_communicator comm, const options& o) {
  std::vector<double> data(o.count, comm.rank() + 1.0);
  comm.allreduce(distcomm::view(data), distcomm::reduce_op::sum);
  const double expected = comm.size() * (comm.size() + 1) / 2.0;
  bool ok = true;
  for (double v : data) ok = ok && v == expected;
  std::lock_guard<std::mutex> lk(print_mu);
  std::printf("rank %d/%d: sum=%g %s (backend %s, strategy %s, %zu x f64)\n", comm.rank(),
              comm.size(), data.empty() ? expected : data.front(), ok ? "ok" : "WRONG",
              comm.backend_name(), comm.strategy_name(), o.count);
  std::fflush(stdout);  // under a launcher, one line per rank as soon as it is known
  return ok;
}

// Ranks as threads of this process.
bool hello_threads(const options& o, const distcomm::config& cfg) {
  bool all_ok = true;
  std::mutex mu;
  distcomm::local_world world(o.np);
  world.run([&](distcomm::local_backend b) {
    const bool ok = hello(distcomm::make_communicator(std::move(b), o.strategy, cfg), o);
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

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"DistComm hello: each rank contributes rank+1 to an allreduce and checks the sum"};
  app.add_option("--backend", o.backend,
                 "Transport (default: DISTCOMM_BACKEND, else local); built: " +
                     distcomm::join_names(distcomm::built_backends()));
  app.add_option("--strategy", o.strategy,
                 "Allreduce algorithm: " + distcomm::join_names(distcomm::strategies()))
      ->capture_default_str();
  app.add_option("--count", o.count, "Elements per rank (f64)")->capture_default_str();
  app.add_option("--np", o.np, "Ranks as threads of this process (local backend only)")
      ->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  try {
    const distcomm::config cfg = distcomm::config::from_env();
    o.strategy = distcomm::find_strategy(o.strategy).name;  // unknown names fail before connecting
    if (o.backend.empty()) o.backend = cfg.backend.empty() ? "local" : cfg.backend;
    bool ok = false;
    if (o.backend != "local") {
      if (app.count("--np") != 0) {
        throw distcomm::invalid_argument_error(
            "--np runs ranks as threads, which only the local backend can; start " + o.backend +
            " ranks as processes: distcomm-run -np N distcomm-hello --backend " + o.backend);
      }
      ok = hello(distcomm::init({o.backend, o.strategy, cfg}), o);
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
