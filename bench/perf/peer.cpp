#include "peer.hpp"

#include <string>

#include "distcomm/core/error.hpp"

namespace distcomm::bench {

// Defined in peer_mpi.cpp / peer_gloo.cpp, compiled only when that library was found.
#ifdef DISTCOMM_BENCH_PEER_MPI
std::unique_ptr<peer> make_mpi_peer(const peer_world& w);
#endif
#ifdef DISTCOMM_BENCH_PEER_GLOO
std::unique_ptr<peer> make_gloo_peer(const peer_world& w);
#endif

void check_peer(const std::string& name, const peer_world& w) {
  if (name == "mpi") {
#ifndef DISTCOMM_BENCH_PEER_MPI
    throw invalid_argument_error("--peer mpi: this build has no MPI (install libopenmpi-dev)");
#endif
    // Without mpirun, MPI_Init makes a world of one process: every rank would reduce alone.
    if (w.size > 1 && !started_by_mpi(w.launcher)) {
      throw invalid_argument_error(
          std::string("--peer mpi runs MPI_Allreduce on MPI_COMM_WORLD, so the ranks must be "
                      "started by mpirun (or mpiexec, srun), not by ") +
          to_string(w.launcher) + "; e.g. mpirun -np 2 distcomm-bench-gloo --peer mpi");
    }
    return;
  }
  if (name == "gloo") {
#ifndef DISTCOMM_BENCH_PEER_GLOO
    throw invalid_argument_error("--peer gloo: this build has no gloo (install libgloo-dev)");
#endif
    return;
  }
  throw invalid_argument_error("--peer " + name + ": unknown peer (mpi, gloo)");
}

std::unique_ptr<peer> make_peer(const std::string& name, const peer_world& w) {
  check_peer(name, w);
  if (name == "mpi") {
#ifdef DISTCOMM_BENCH_PEER_MPI
    return make_mpi_peer(w);
#endif
  }
  if (name == "gloo") {
#ifdef DISTCOMM_BENCH_PEER_GLOO
    return make_gloo_peer(w);
#endif
  }
  return nullptr;  // not reached: check_peer threw
}

}  // namespace distcomm::bench
