#include "peer.hpp"

#include <string>
#include <vector>

#include "distcomm/core/error.hpp"

namespace distcomm::bench {

// Defined in peer_mpi.cpp / peer_gloo.cpp, compiled only when that library was found.
#ifdef DISTCOMM_BENCH_PEER_MPI
std::unique_ptr<peer> make_mpi_peer(const peer_world& w);
#endif
#ifdef DISTCOMM_BENCH_PEER_GLOO
std::unique_ptr<peer> make_gloo_peer(const peer_world& w);
#endif

namespace {

void check_mpi(const peer_world& w) {
#ifndef DISTCOMM_BENCH_PEER_MPI
  (void)w;
  throw invalid_argument_error("--peer mpi: this build has no MPI (install libopenmpi-dev)");
#else
  // Without mpirun, MPI_Init makes a world of one process: every rank would reduce alone.
  if (w.size > 1 && !started_by_mpi(w.launcher)) {
    throw invalid_argument_error(
        std::string("--peer mpi runs MPI_Allreduce on MPI_COMM_WORLD, so the ranks must be "
                    "started by mpirun (or mpiexec, srun), not by ") +
        to_string(w.launcher) + "; e.g. mpirun -np 2 distcomm-bench-gloo --peer mpi");
  }
#endif
}

void check_gloo(const peer_world&) {
#ifndef DISTCOMM_BENCH_PEER_GLOO
  throw invalid_argument_error("--peer gloo: this build has no gloo (install libgloo-dev)");
#endif
}

// Not reached where the library was not found: its check threw first.
std::unique_ptr<peer> make_mpi(const peer_world& w) {
#ifdef DISTCOMM_BENCH_PEER_MPI
  return make_mpi_peer(w);
#else
  (void)w;
  return nullptr;
#endif
}

std::unique_ptr<peer> make_gloo(const peer_world& w) {
#ifdef DISTCOMM_BENCH_PEER_GLOO
  return make_gloo_peer(w);
#else
  (void)w;
  return nullptr;
#endif
}

// The peers host memory runs against, and those a program added (add_peer).
std::vector<peer_kind>& kinds() {
  static std::vector<peer_kind> k = {{"mpi", check_mpi, make_mpi}, {"gloo", check_gloo, make_gloo}};
  return k;
}

const peer_kind& kind_of(const std::string& name) {
  std::string known;
  for (const peer_kind& k : kinds()) {
    if (k.name == name) return k;
    known += (known.empty() ? "" : ", ") + k.name;
  }
  throw invalid_argument_error("--peer " + name + ": unknown peer (" + known + ")");
}

}  // namespace

void add_peer(peer_kind k) { kinds().push_back(std::move(k)); }

void check_peer(const std::string& name, const peer_world& w) { kind_of(name).check(w); }

std::unique_ptr<peer> make_peer(const std::string& name, const peer_world& w) {
  const peer_kind& k = kind_of(name);
  k.check(w);
  return k.make(w);
}

}  // namespace distcomm::bench
