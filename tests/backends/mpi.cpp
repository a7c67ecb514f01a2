// The backend suite on the MPI backend, under mpirun: one rank per process, each backend a
// duplicate of MPI_COMM_WORLD.
#define DOCTEST_CONFIG_IMPLEMENT
#include <mpi.h>

#include "context.hpp"
#include "distcomm/backends/mpi.hpp"

namespace {

struct mpi_env {
  using backend = distcomm::mpi_backend;
  static constexpr bool cancel_retracts = true;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    int rank = 0;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    backend_suite::rank_context<backend> ctx{rank, size, [] { return distcomm::mpi_backend(); }};
    body(ctx);
  }
};

}  // namespace

TYPE_TO_STRING_AS("mpi", mpi_env);
#define DISTCOMM_SUITE_ENVS mpi_env
#include "suite.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  const int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
