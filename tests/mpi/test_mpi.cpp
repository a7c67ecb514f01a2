// What only the MPI backend has, under mpirun: adopting MPI_COMM_WORLD (attach and duplicate),
// and abort() failing this process's waits only. The backend contract, every strategy and the
// native collectives run in the shared backend suite (tests/backends); a rank killed mid-loop in
// tests/faults. Every rank runs the same test cases in the same order.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdint>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/strategy/ring.hpp"

using namespace distcomm;

namespace {

config test_config() {
  config c;
  c.timeout = std::chrono::seconds(30);
  return c;
}

deadline soon(double s = 20.0) { return deadline_after(std::chrono::duration<double>(s)); }

void world_barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace

TEST_CASE("abort fails later waits with peer_lost_error") {
  mpi_backend b;
  b.abort("test abort");
  int v = 0;
  CHECK_THROWS_WITH_AS(b.irecv(&v, 4, 0, 9).wait(soon()), doctest::Contains("test abort"),
                       peer_lost_error);
  world_barrier();
}

TEST_CASE("adopting MPI_COMM_WORLD: attach and duplicate") {
  for (auto kind : {mpi_backend::attach, mpi_backend::duplicate}) {
    {
      communicator<mpi_backend, strategy::ring> comm(mpi_backend(MPI_COMM_WORLD, kind),
                                                     test_config());
      CHECK((comm.backend().comm() == MPI_COMM_WORLD) == (kind == mpi_backend::attach));
      int world = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &world);
      CHECK(comm.size() == world);
      std::vector<std::int64_t> v(10, comm.rank() + 1);
      comm.allreduce(view(v));
      for (auto x : v) CHECK(x == world * (world + 1) / 2);
    }
    // MPI_COMM_WORLD still works after the backend is gone (attach never frees it).
    int x = 1, y = 0;
    CHECK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
  }
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
