// distcomm-hello: every rank contributes rank+1 to an allreduce and checks the sum.
//   distcomm-hello --np 4 --strategy ring --count 1000000     ranks as threads (local backend)
//   mpirun -np 2 distcomm-hello                              one rank per process, any launcher
// Under a launcher (mpirun, srun, distcomm-run, torchrun-style or TF_CONFIG environments) each
// process finds its rank and the job's store through distcomm::bootstrap(). This build has no
// multi-process transport yet, so there the sum is computed through the store itself.
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace {

struct options {
  std::string backend = "local";
  std::string strategy = "auto";
  std::size_t count = 1024;
  int np = 4;
};

std::mutex print_mu;

// Returns true when every element equals 1 + 2 + ... + size.
template <class Strategy, class Backend>
bool hello(Backend backend, const options& o) {
  distcomm::communicator<Backend, Strategy> comm(std::move(backend));
  std::vector<double> data(o.count, comm.rank() + 1.0);
  comm.allreduce(distcomm::view(data), distcomm::reduce_op::sum);
  const double expected = comm.size() * (comm.size() + 1) / 2.0;
  bool ok = true;
  for (double v : data) ok = ok && v == expected;
  std::lock_guard<std::mutex> lk(print_mu);
  std::printf("rank %d/%d: sum=%g %s\n", comm.rank(), comm.size(),
              data.empty() ? expected : data.front(), ok ? "ok" : "WRONG");
  return ok;
}

template <class Backend>
bool hello_with(const std::string& strategy, Backend backend, const options& o) {
  namespace s = distcomm::strategy;
  if (strategy == "ring") return hello<s::ring>(std::move(backend), o);
  if (strategy == "tree") return hello<s::tree>(std::move(backend), o);
  if (strategy == "ps") return hello<s::parameter_server>(std::move(backend), o);
  if (strategy == "native") {
    if constexpr (distcomm::has_native_allreduce_v<Backend>) {
      return hello<s::native>(std::move(backend), o);
    }
  }
  return hello<s::automatic>(std::move(backend), o);
}

}  // namespace

// One rank of a multi-process job: meet through the store, add rank+1, read the total.
int hello_job() {
  const distcomm::config cfg = distcomm::config::from_env();
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
  return sum == expected ? 0 : 1;
}

int main(int argc, char** argv) {
  options o;
  CLI::App app{"DistComm hello: each rank contributes rank+1 to an allreduce and checks the sum"};
  app.add_option("--backend", o.backend, "Transport")->check(CLI::IsMember({"local"}));
  app.add_option("--strategy", o.strategy, "Allreduce algorithm")
      ->check(CLI::IsMember({"auto", "ring", "tree", "ps", "native"}));
  app.add_option("--count", o.count, "Elements per rank (f64)");
  app.add_option("--np", o.np, "Ranks (threads) for the local backend")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  try {
    // Started by a launcher and not asked for threads: be one rank of the job.
    if (app.count("--np") == 0 &&
        distcomm::detect_world().launcher != distcomm::launcher_kind::none) {
      return hello_job();
    }
    bool all_ok = true;
    std::mutex mu;
    distcomm::local_world world(o.np);
    world.run([&](distcomm::local_backend b) {
      const bool ok = hello_with(o.strategy, std::move(b), o);
      std::lock_guard<std::mutex> lk(mu);
      all_ok = all_ok && ok;
    });
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-hello: %s\n", e.what());
    return 2;
  }
}
