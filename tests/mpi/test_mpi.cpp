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

namespace {

// Receives `posted` bytes from rank 1 on `tag` into a buffer followed by guard bytes, while rank 1
// sends `sent`: the wait must fail with mismatch_error naming both ranks and sizes, and not one
// byte past the posted ones may change. A later message on the tag is then received normally.
void check_oversized(mpi_backend& b, std::size_t sent, std::size_t posted, tag_t tag) {
  CAPTURE(sent);
  CAPTURE(posted);
  constexpr std::size_t guard = 64 * 1024;
  constexpr unsigned char untouched = 0xee;
  if (b.rank() == 1) {
    const std::vector<unsigned char> data(sent, 0x5a);
    const std::int64_t next = 4242;
    auto big = b.isend(data.data(), data.size(), 0, tag);
    auto small = b.isend(&next, sizeof next, 0, tag);
    big.wait(soon());
    small.wait(soon());
  } else if (b.rank() == 0) {
    std::vector<unsigned char> buf(posted + guard, untouched);
    try {
      b.irecv(buf.data(), posted, 1, tag).wait(soon());
      FAIL_CHECK("a receive smaller than the message completed without mismatch_error");
    } catch (const mismatch_error& e) {
      const std::string m = e.what();
      // A message sent as pieces (backends/mpi/src/pieces.hpp) is named from the pieces taken so
      // far: "at least".
      CHECK_MESSAGE(
          (m.find("rank 1 sent " + std::to_string(sent) + " bytes") != std::string::npos ||
           m.find("rank 1 sent at least " + std::to_string(sent) + " bytes") != std::string::npos),
          m);
      CHECK_MESSAGE(m.find("rank 0 expected " + std::to_string(posted)) != std::string::npos, m);
    }
    std::size_t written = 0;
    for (std::size_t i = posted; i < buf.size(); ++i) written += buf[i] != untouched;
    CHECK_MESSAGE(written == 0, written << " bytes written past the posted " << posted);
    std::int64_t next = 0;
    b.irecv(&next, sizeof next, 1, tag).wait(soon());
    CHECK(next == 4242);
  }
  world_barrier();
}

}  // namespace

TEST_CASE("a message larger than the posted receive: mismatch_error, nothing written past it") {
  mpi_backend b;
  check_oversized(b, 40, 8, 201);         // eager
  check_oversized(b, 12000, 8000, 202);   // above vader's 4 KiB eager limit: sent as pieces
  check_oversized(b, 20000, 16000, 205);  // one message past the pieces' sizes
  check_oversized(b, 300008 * sizeof(float), 300007 * sizeof(float), 203);  // one element more
  check_oversized(b, 8, 0, 204);
}

TEST_CASE("receives of one peer and tag match in posting order whatever order they are tested in") {
  mpi_backend b;
  constexpr tag_t tag = 211;
  if (b.rank() == 1) {
    std::vector<std::int64_t> first(3, 1), second(3000, 2), third(20000, 3), fourth(2, 4);
    std::vector<mpi_request> sends;
    sends.push_back(b.isend(first.data(), first.size() * 8, 0, tag));
    sends.push_back(b.isend(second.data(), second.size() * 8, 0, tag));
    sends.push_back(b.isend(third.data(), third.size() * 8, 0, tag));
    sends.push_back(b.isend(fourth.data(), fourth.size() * 8, 0, tag));
    for (auto& s : sends) {
      try {
        s.wait(soon());
      } catch (const mismatch_error&) {
      }
    }
  } else if (b.rank() == 0) {
    // The third receive expects fewer elements than were sent: it fails alone, its message is
    // consumed, and the receives around it still get their own messages.
    std::vector<std::int64_t> first(3), second(3000), third(10000), fourth(2);
    auto r1 = b.irecv(first.data(), first.size() * 8, 1, tag);
    auto r2 = b.irecv(second.data(), second.size() * 8, 1, tag);
    auto r3 = b.irecv(third.data(), third.size() * 8, 1, tag);
    auto r4 = b.irecv(fourth.data(), fourth.size() * 8, 1, tag);
    r4.wait(soon());
    CHECK_THROWS_AS(r3.wait(soon()), mismatch_error);
    r2.wait(soon());
    r1.wait(soon());
    CHECK(first == std::vector<std::int64_t>(3, 1));
    CHECK(second == std::vector<std::int64_t>(3000, 2));
    CHECK(fourth == std::vector<std::int64_t>(2, 4));
  }
  world_barrier();
}

TEST_CASE("messages that arrive before their receive is posted keep their order per tag") {
  mpi_backend b;
  constexpr tag_t x = 221, y = 222;
  if (b.rank() == 1) {
    const std::int64_t first = 1, third = 3;
    const std::vector<std::int64_t> second(20000, 2);  // above the eager limits: rendezvous
    std::vector<mpi_request> sends;
    sends.push_back(b.isend(&first, 8, 0, x));
    sends.push_back(b.isend(second.data(), second.size() * 8, 0, y));
    sends.push_back(b.isend(&third, 8, 0, x));
    world_barrier();  // the messages are on their way before rank 0 posts anything
    for (auto& s : sends) s.wait(soon());
  } else if (b.rank() == 0) {
    world_barrier();
    // The receive on y takes its message past the first one on x, which waits for its own.
    std::vector<std::int64_t> second(20000);
    b.irecv(second.data(), second.size() * 8, 1, y).wait(soon());
    CHECK(second == std::vector<std::int64_t>(20000, 2));
    std::int64_t a = 0, c = 0;
    auto ra = b.irecv(&a, 8, 1, x);
    auto rc = b.irecv(&c, 8, 1, x);
    rc.wait(soon());
    ra.wait(soon());
    CHECK(a == 1);
    CHECK(c == 3);
  } else {
    world_barrier();
  }
  world_barrier();
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
