// The MPI backend under mpirun: the point-to-point contract, every strategy x dtype x op x count
// against exact expected values and bitwise agreement across ranks, native vs ring on random
// floats, and adopting MPI_COMM_WORLD. Every rank runs the same test cases in the same order.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/core/half.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/parameter_server.hpp"
#include "distcomm/strategy/ring.hpp"
#include "distcomm/strategy/tree.hpp"

using namespace distcomm;

namespace {

config test_config() {
  config c;
  c.timeout = std::chrono::seconds(30);
  return c;
}

deadline soon(double s = 20.0) { return deadline_after(std::chrono::duration<double>(s)); }

void world_barrier() { MPI_Barrier(MPI_COMM_WORLD); }

// FNV-1a of a byte range: compared across ranks with MPI_Allreduce MIN and MAX.
std::uint64_t hash(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

bool same_on_every_rank(std::uint64_t h) {
  std::uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

void store(void* base, std::size_t i, dtype t, double v) {
  auto* p = static_cast<unsigned char*>(base);
  switch (t) {
    case dtype::f16: {
      f16 x(static_cast<float>(v));
      std::memcpy(p + 2 * i, &x, 2);
      break;
    }
    case dtype::bf16: {
      bf16 x(static_cast<float>(v));
      std::memcpy(p + 2 * i, &x, 2);
      break;
    }
    case dtype::f32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case dtype::f64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case dtype::i8:
      reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      break;
    case dtype::u8:
      reinterpret_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
      break;
    case dtype::i32:
      reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      break;
    case dtype::i64:
      reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      break;
  }
}

double load(const void* base, std::size_t i, dtype t) {
  const auto* p = static_cast<const unsigned char*>(base);
  switch (t) {
    case dtype::f16: {
      f16 x(0.0f);
      std::memcpy(&x, p + 2 * i, 2);
      return static_cast<double>(static_cast<float>(x));
    }
    case dtype::bf16: {
      bf16 x(0.0f);
      std::memcpy(&x, p + 2 * i, 2);
      return static_cast<double>(static_cast<float>(x));
    }
    case dtype::f32:
      return reinterpret_cast<const float*>(p)[i];
    case dtype::f64:
      return reinterpret_cast<const double*>(p)[i];
    case dtype::i8:
      return reinterpret_cast<const std::int8_t*>(p)[i];
    case dtype::u8:
      return reinterpret_cast<const std::uint8_t*>(p)[i];
    case dtype::i32:
      return reinterpret_cast<const std::int32_t*>(p)[i];
    case dtype::i64:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
  }
  return 0;
}

// Small integers (1..5, times p for avg) so every sum, product and average is exact in every
// dtype for up to 3 ranks (5^3 = 125 fits i8).
double input_value(int rank, std::size_t i, reduce_op op, int p) {
  const double v = static_cast<double>((i + static_cast<std::size_t>(rank) * 3) % 5 + 1);
  return op == reduce_op::avg ? v * p : v;
}

double expected_value(std::size_t i, reduce_op op, int p) {
  double acc = input_value(0, i, op, p);
  for (int r = 1; r < p; ++r) {
    const double v = input_value(r, i, op, p);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:
        acc += v;
        break;
      case reduce_op::min:
        acc = std::min(acc, v);
        break;
      case reduce_op::max:
        acc = std::max(acc, v);
        break;
      case reduce_op::prod:
        acc *= v;
        break;
    }
  }
  return op == reduce_op::avg ? acc / p : acc;
}

template <class S>
void check_strategy_allreduce() {
  communicator<mpi_backend, S> comm(mpi_backend(), test_config());
  const int p = comm.size();
  const int me = comm.rank();
  for (dtype t : all_dtypes) {
    for (reduce_op op : all_reduce_ops) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                                std::size_t{100003}}) {
        for (bool in_place : {true, false}) {
          CAPTURE(S::name);
          CAPTURE(to_string(t));
          CAPTURE(to_string(op));
          CAPTURE(count);
          CAPTURE(in_place);
          const std::size_t bytes = count * dtype_size(t);
          std::vector<unsigned char> in(bytes + 1), out(bytes + 1, 0xAB);
          for (std::size_t i = 0; i < count; ++i) store(in.data(), i, t, input_value(me, i, op, p));
          tensor_view vin{in.data(), count, t};
          tensor_view vout{out.data(), count, t};
          if (in_place) {
            comm.allreduce(vin, op);
          } else {
            comm.allreduce(vin, vout, op);
          }
          const unsigned char* res = in_place ? in.data() : out.data();
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i) {
            if (load(res, i, t) != expected_value(i, op, p)) ++bad;
          }
          CHECK(bad == 0);
          CHECK(same_on_every_rank(hash(res, bytes)));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("p2p: ordered matching per peer and tag, zero-byte messages") {
  mpi_backend b;
  const int p = b.size(), me = b.rank();
  const int next = (me + 1) % p, prev = (me + p - 1) % p;
  std::vector<std::int32_t> out(64), in(64, -1);
  std::vector<mpi_request> reqs;
  for (int k = 0; k < 8; ++k) {
    out[static_cast<std::size_t>(k)] = me * 100 + k;
  }
  for (int k = 0; k < 8; ++k) reqs.push_back(b.irecv(&in[static_cast<std::size_t>(k)], 4, prev, 3));
  for (int k = 0; k < 8; ++k)
    reqs.push_back(b.isend(&out[static_cast<std::size_t>(k)], 4, next, 3));
  mpi_request z1 = b.irecv(nullptr, 0, prev, 5);
  mpi_request z2 = b.isend(nullptr, 0, next, 5);
  for (auto& r : reqs) r.wait(soon());
  z1.wait(soon());
  z2.wait(soon());
  z2.wait(soon());  // waiting a completed request is a no-op
  CHECK(z2.test());
  for (int k = 0; k < 8; ++k) CHECK(in[static_cast<std::size_t>(k)] == prev * 100 + k);
  mpi_request empty;
  CHECK(empty.test());
  empty.wait(soon());
  world_barrier();
}

TEST_CASE("p2p: a size mismatch is a mismatch_error, never a truncation") {
  mpi_backend b;
  const int me = b.rank();
  std::vector<char> buf(32, 'x');
  if (me == 1) {
    mpi_request a = b.isend(buf.data(), 8, 0, 4);   // smaller than posted
    mpi_request c = b.isend(buf.data(), 16, 0, 4);  // larger than posted
    a.wait(soon());
    c.wait(soon());
  } else if (me == 0) {
    mpi_request a = b.irecv(buf.data(), 16, 1, 4);
    CHECK_THROWS_AS(a.wait(soon()), mismatch_error);
    mpi_request c = b.irecv(buf.data(), 4, 1, 4);
    try {
      c.wait(soon());
      FAIL("no mismatch_error");
    } catch (const mismatch_error& e) {
      CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
    }
  }
  world_barrier();
}

TEST_CASE("p2p: a wait past its deadline is a timeout_error naming peer, tag and bytes") {
  mpi_backend b;
  if (b.rank() == 0) {
    char c = 0;
    mpi_request r = b.irecv(&c, 1, 1, 7);
    const auto t0 = clock::now();
    try {
      r.wait(deadline_after(std::chrono::seconds(1)));
      FAIL("no timeout_error");
    } catch (const timeout_error& e) {
      const std::string m = e.what();
      CHECK(m.find("rank 1") != std::string::npos);
      CHECK(m.find("tag 7") != std::string::npos);
      CHECK(m.find("1 bytes") != std::string::npos);
    }
    CHECK(clock::now() - t0 < std::chrono::seconds(5));
  }
  world_barrier();
}

TEST_CASE("p2p: destroying a pending receive cancels it") {
  mpi_backend b;
  int got = -1;
  if (b.rank() == 0) {
    { mpi_request r = b.irecv(&got, 4, 1, 8); }  // cancelled before anything was sent
  }
  world_barrier();
  if (b.rank() == 1) {
    int v = 42;
    b.isend(&v, 4, 0, 8).wait(soon());
  } else if (b.rank() == 0) {
    CHECK(got == -1);
    int v = 0;
    b.irecv(&v, 4, 1, 8).wait(soon());
    CHECK(v == 42);  // the message went to the new receive, not the cancelled one
  }
  world_barrier();
}

TEST_CASE("abort fails later waits with peer_lost_error") {
  mpi_backend b;
  b.abort("test abort");
  int v = 0;
  CHECK_THROWS_AS(b.irecv(&v, 4, 0, 9).wait(soon()), peer_lost_error);
  world_barrier();
}

TEST_CASE("strategy ring: every dtype, op and count") {
  check_strategy_allreduce<strategy::ring>();
}
TEST_CASE("strategy tree: every dtype, op and count") {
  check_strategy_allreduce<strategy::tree>();
}
TEST_CASE("strategy parameter_server: every dtype, op and count") {
  check_strategy_allreduce<strategy::parameter_server>();
}
TEST_CASE("strategy native: every dtype, op and count") {
  check_strategy_allreduce<strategy::native>();
}
TEST_CASE("strategy automatic: every dtype, op and count") {
  check_strategy_allreduce<strategy::automatic>();
}

TEST_CASE("native agrees with ring on random floats") {
  communicator<mpi_backend, strategy::native> nat(mpi_backend(), test_config());
  communicator<mpi_backend, strategy::ring> ring(mpi_backend(), test_config());
  std::mt19937 gen(static_cast<unsigned>(1234 + nat.rank()));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(100003);
  for (float& x : a) x = dist(gen);
  std::vector<float> b = a;
  nat.allreduce(view(a));
  ring.allreduce(view(b));
  float worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  CHECK(worst < 1e-5f);
  CHECK(same_on_every_rank(hash(a.data(), a.size() * 4)));
}

TEST_CASE("native reduce_scatter, allgather, broadcast, barrier") {
  communicator<mpi_backend, strategy::native> comm(mpi_backend(), test_config());
  const int p = comm.size(), me = comm.rank();
  const std::size_t n = 1001;
  std::vector<std::int32_t> in(n * static_cast<std::size_t>(p)), out(n);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::int32_t>(i) + me;
  comm.reduce_scatter(view(in), view(out));
  const int rank_sum = p * (p - 1) / 2;
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(out[i] ==
            p * static_cast<std::int32_t>(static_cast<std::size_t>(me) * n + i) + rank_sum);
  }
  std::vector<double> mine(n, me + 0.5), all(n * static_cast<std::size_t>(p));
  comm.allgather(view(mine), view(all));
  for (std::size_t i = 0; i < all.size(); ++i) REQUIRE(all[i] == static_cast<double>(i / n) + 0.5);
  std::vector<bf16> h(n, bf16(static_cast<float>(me)));
  comm.broadcast(view(h), p - 1);
  for (const bf16& x : h) REQUIRE(static_cast<float>(x) == static_cast<float>(p - 1));
  comm.barrier();
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

// With DISTCOMM_MPI_KILL_TEST=1: rank 1 SIGKILLs itself in the middle of an allreduce loop. The
// survivors must end in bounded time, either through peer_lost_error/timeout_error (exit 3) or
// because mpirun aborts the job when it sees a rank die (Open MPI's default policy).
int kill_test() {
  config c = test_config();
  c.timeout = std::chrono::seconds(10);
  communicator<mpi_backend, strategy::ring> comm(mpi_backend(), c);
  std::vector<float> v(1 << 16, 1.0f);
  try {
    for (int i = 0; i < 100000; ++i) {
      if (i == 20 && comm.rank() == 1) std::raise(SIGKILL);
      comm.allreduce(view(v));
    }
  } catch (const error& e) {
    std::fprintf(stderr, "rank %d: %s\n", comm.rank(), e.what());
    return 3;
  }
  return 0;  // not reached by a correct backend: the test expects a failure
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (const char* k = std::getenv("DISTCOMM_MPI_KILL_TEST"); k != nullptr && k[0] == '1') {
    const int rc = kill_test();
    if (rc != 0) std::_Exit(rc);  // MPI_Finalize would wait for the dead rank
    MPI_Finalize();
    return 0;
  }
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  int rc = ctx.run();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
