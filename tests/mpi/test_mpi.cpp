// What only the MPI backend has, under mpirun: adopting MPI_COMM_WORLD (attach and duplicate),
// and abort() failing this process's waits only. The backend contract, every strategy and the
// native collectives run in the shared backend suite (tests/backends); a rank killed mid-loop in
// tests/faults. Every rank runs the same test cases in the same order.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/strategy/native.hpp"
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

// 8-bit inputs whose sums and products overflow: element 0 is issue 12's case (rank 0 -128, the
// others -17: two's complement makes the 2-rank avg 55, saturation -64), the rest sweep every byte.
template <class T>
T byte_input(int rank, std::size_t i) {
  if (i == 0) return static_cast<T>(rank == 0 ? -128 : -17);
  return static_cast<T>((i * 7 + static_cast<std::size_t>(rank) * 101 + 60) & 0xff);
}

// What every path but a saturating one gives: the sum or product of all ranks' inputs modulo 256,
// avg the wrapped sum divided by the rank count with truncation (as divide() does).
template <class T>
T wrapped(reduce_op op, int ranks, std::size_t i) {
  long v = op == reduce_op::prod ? 1 : 0;
  for (int r = 0; r < ranks; ++r) {
    const long x = byte_input<T>(r, i);
    v = op == reduce_op::prod ? static_cast<T>(v * x) : static_cast<T>(v + x);
  }
  return op == reduce_op::avg ? static_cast<T>(v / ranks) : static_cast<T>(v);
}

template <class T>
std::vector<T> byte_inputs(int rank, std::size_t n, std::size_t first = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = byte_input<T>(rank, first + i);
  return v;
}

// Elements of `got` that differ from the wrapped reduction of elements first.. of the inputs.
template <class T>
std::size_t wrong_elements(const std::vector<T>& got, reduce_op op, int ranks,
                           std::size_t first = 0) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != wrapped<T>(op, ranks, first + i);
  return wrong;
}

}  // namespace

TEST_CASE_TEMPLATE("native reductions of i8 and u8 wrap around like every other path", T,
                   std::int8_t, std::uint8_t) {
  communicator<mpi_backend, strategy::native> comm(mpi_backend(), test_config());
  const int p = comm.size();
  const int me = comm.rank();
  // 1000 elements: past the vector widths of Open MPI's AVX reductions (64 bytes), with a tail.
  constexpr std::size_t n = 1000;
  for (reduce_op op : {reduce_op::sum, reduce_op::avg, reduce_op::prod}) {
    const std::string op_name = to_string(op);
    CAPTURE(op_name);
    const std::vector<T> in = byte_inputs<T>(me, n);
    std::vector<T> out(n);
    comm.allreduce(view(in), view(out), op);
    CHECK(wrong_elements(out, op, p) == 0);
    if (std::is_signed_v<T> && op == reduce_op::avg && p == 2) CHECK(out[0] == 55);

    std::vector<T> inplace = in;
    comm.allreduce(view(inplace), op);
    CHECK(wrong_elements(inplace, op, p) == 0);

    // Grouped: fusion::buffer packs the small tensors into one native allreduce.
    std::vector<std::vector<T>> group;
    std::vector<tensor_view> views;
    for (std::size_t k = 0; k < 5; ++k) group.push_back(byte_inputs<T>(me, 100 + k * 37, k * 50));
    for (auto& g : group) views.push_back(view(g));
    comm.allreduce(span<const tensor_view>(views), op);
    for (std::size_t k = 0; k < group.size(); ++k) {
      CHECK_MESSAGE(wrong_elements(group[k], op, p, k * 50) == 0, "tensor " << k);
    }

    // Reduce-scatter: rank r gets block r of the reduction.
    const std::size_t block = 300;
    const std::vector<T> all = byte_inputs<T>(me, block * static_cast<std::size_t>(p));
    std::vector<T> mine(block);
    comm.reduce_scatter(view(all), view(mine), op);
    CHECK(wrong_elements(mine, op, p, block * static_cast<std::size_t>(me)) == 0);
  }
  world_barrier();
}

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
