// distcomm-test-mpi-hello: the smallest MPI backend program (an allreduce of each rank's number,
// one line per rank), for the launcher tests: tests/mpi/hydra.sh starts it with MPICH's launcher
// to check that a program built with another MPI refuses to run as one-rank jobs. Exits 2 with
// the error's kind and message when the communicator cannot be made or the allreduce fails.
#include <cstdio>
#include <exception>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/strategy/ring.hpp"

int main() {
  namespace dc = distcomm;
  try {
    dc::communicator<dc::mpi_backend, dc::strategy::ring> comm{dc::mpi_backend()};
    std::vector<int> v{comm.rank() + 1};
    comm.allreduce(dc::view(v));
    std::printf("rank %d of %d: sum of the ranks' numbers %d\n", comm.rank(), comm.size(), v[0]);
    return 0;
  } catch (const dc::rendezvous_error& e) {
    std::fprintf(stderr, "distcomm-test-mpi-hello: rendezvous_error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-test-mpi-hello: %s\n", e.what());
  }
  return 2;
}
