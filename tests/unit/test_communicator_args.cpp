// communicator argument validation (invalid_argument_error, communicator still usable afterwards)
// and transport failures (the communicator refuses further calls; the other ranks fail fast).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/core/error.hpp"

using namespace distcomm;
using namespace std::chrono_literals;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

// The message of the E that f throws, or "<no exception>"; other exceptions propagate.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

#define CHECK_INVALID(call, part) CHECK_HAS(error_of<invalid_argument_error>([&] { call; }), part)

config test_config() {
  config c;
  c.timeout = 2s;
  return c;
}

constexpr std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
constexpr auto bad_dtype = static_cast<dtype>(99);
constexpr auto bad_op = static_cast<reduce_op>(99);

double seconds_since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

// Every bad call a rank can make; none of them may touch the transport.
template <class Comm>
void make_bad_calls(Comm& comm) {
  const std::size_t p = static_cast<std::size_t>(comm.size());
  std::vector<float> a(6, 1.0f), big(6 * p, 1.0f), small(2, 1.0f);
  std::vector<std::int32_t> ints(6, 1);
  const tensor_view null4{nullptr, 4, dtype::f32};

  // Null data with a non-zero count.
  CHECK_INVALID(comm.allreduce(null4), "null");
  CHECK_INVALID(comm.allreduce(null4, view(a)), "allreduce input: data is null but count is 4");
  CHECK_INVALID(comm.allreduce(view(a), tensor_view{nullptr, 6, dtype::f32}), "allreduce output");
  const std::vector<tensor_view> group_with_null = {view(a), null4};
  CHECK_INVALID(comm.allreduce(group_with_null), "grouped allreduce tensor: data is null");
  CHECK_INVALID(comm.broadcast(null4, 0), "broadcast buffer: data is null");
  CHECK_INVALID(comm.reduce_scatter(tensor_view{nullptr, 6 * p, dtype::f32}, view(a)),
                "reduce_scatter input");
  CHECK_INVALID(comm.reduce_scatter(view(big), tensor_view{nullptr, 6, dtype::f32}),
                "reduce_scatter output");
  CHECK_INVALID(comm.allgather(tensor_view{nullptr, 6, dtype::f32}, view(big)), "allgather input");
  CHECK_INVALID(comm.allgather(view(a), tensor_view{nullptr, 6 * p, dtype::f32}),
                "allgather output");

  // Root out of range.
  CHECK_INVALID(comm.broadcast(view(a), -1), "root -1");
  CHECK_INVALID(comm.broadcast(view(a), comm.size()), "root " + std::to_string(comm.size()));

  // Values outside the enums.
  tensor_view bad_type = view(a);
  bad_type.type = bad_dtype;
  CHECK_INVALID(comm.allreduce(bad_type), "invalid dtype value 99");
  CHECK_INVALID(comm.allreduce(view(a), bad_type), "invalid dtype value 99");
  const std::vector<tensor_view> group_bad_type = {view(a), bad_type};
  CHECK_INVALID(comm.allreduce(group_bad_type), "invalid dtype value 99");
  CHECK_INVALID(comm.broadcast(bad_type, 0), "invalid dtype value 99");
  CHECK_INVALID(comm.allgather(bad_type, view(big)), "invalid dtype value 99");
  CHECK_INVALID(comm.reduce_scatter(view(big), bad_type), "invalid dtype value 99");
  CHECK_INVALID(comm.allreduce(view(a), bad_op), "invalid reduce_op value 99");
  CHECK_INVALID(comm.allreduce(view(a), view(a), bad_op), "invalid reduce_op value 99");
  const std::vector<tensor_view> good_group = {view(a), view(ints)};
  CHECK_INVALID(comm.allreduce(good_group, bad_op), "invalid reduce_op value 99");
  CHECK_INVALID(comm.reduce_scatter(view(big), view(a), bad_op), "invalid reduce_op value 99");

  // Counts whose byte size overflows.
  const tensor_view overflow{a.data(), huge, dtype::f32};
  CHECK_INVALID(comm.allreduce(overflow), "overflow the address space");
  const std::vector<tensor_view> group_overflow = {overflow};
  CHECK_INVALID(comm.allreduce(group_overflow), "overflow the address space");
  CHECK_INVALID(comm.broadcast(overflow, 0), "overflow the address space");

  // allreduce: in and out must agree.
  CHECK_INVALID(comm.allreduce(view(a), view(small)), "output has 2 elements, expected 6");
  CHECK_INVALID(comm.allreduce(view(small), view(a)), "output has 6 elements, expected 2");
  {
    // Which one is called input is checked in its own test case below.
    const std::string m =
        error_of<invalid_argument_error>([&] { comm.allreduce(view(a), view(ints)); });
    CHECK_HAS(m, "f32");
    CHECK_HAS(m, "i32");
  }

  // reduce_scatter: in.count == out.count * size, same dtype.
  std::vector<float> short_in(6 * p - 1, 1.0f);
  CHECK_INVALID(
      comm.reduce_scatter(view(short_in), view(a)),
      "input has " + std::to_string(6 * p - 1) + " elements, expected " + std::to_string(6 * p));
  CHECK_INVALID(comm.reduce_scatter(view(a), view(a)), "reduce_scatter");
  {
    std::vector<std::int32_t> ints_big(6 * p, 1);
    const std::string m =
        error_of<invalid_argument_error>([&] { comm.reduce_scatter(view(ints_big), view(a)); });
    CHECK_HAS(m, "input is i32");
    CHECK_HAS(m, "output is f32");
  }
  std::vector<std::uint8_t> bytes(8, 1);
  // Valid alone (one byte per element), but count x size overflows for every size >= 2.
  const tensor_view huge_u8{bytes.data(), huge + 1, dtype::u8};
  CHECK_INVALID(comm.reduce_scatter(view(bytes), huge_u8), "overflows size_t");

  // allgather: out.count == in.count * size, same dtype.
  std::vector<float> long_out(6 * p + 1, 1.0f);
  CHECK_INVALID(
      comm.allgather(view(a), view(long_out)),
      "output has " + std::to_string(6 * p + 1) + " elements, expected " + std::to_string(6 * p));
  CHECK_INVALID(comm.allgather(view(a), view(a)), "allgather");
  {
    std::vector<std::int32_t> ints_big(6 * p, 1);
    const std::string m =
        error_of<invalid_argument_error>([&] { comm.allgather(view(a), view(ints_big)); });
    CHECK_HAS(m, "f32");
    CHECK_HAS(m, "i32");
  }
  CHECK_INVALID(comm.allgather(huge_u8, view(bytes)), "overflows size_t");

  // Device memory on a host-only backend.
  const tensor_view on_gpu = cuda_view(a.data(), a.size(), dtype::f32, 0);
  CHECK_INVALID(comm.allreduce(on_gpu), "cuda memory");
  CHECK_INVALID(comm.allreduce(view(a), on_gpu), "backend 'local'");
  const std::vector<tensor_view> group_gpu = {view(a), on_gpu};
  CHECK_INVALID(comm.allreduce(group_gpu), "cuda memory");
  CHECK_INVALID(comm.broadcast(on_gpu, 0), "cuda memory");
  CHECK_INVALID(comm.allgather(on_gpu, view(big)), "cuda memory");

  // None of the calls above changed the data.
  CHECK(a == std::vector<float>(6, 1.0f));
}

// Correct calls of every kind, checked; they prove the communicator is still usable.
template <class Comm>
void make_good_calls(Comm& comm) {
  const int p = comm.size();
  const int r = comm.rank();
  const auto pp = static_cast<std::size_t>(p);
  std::vector<float> a(6);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>(r + 1) * static_cast<float>(i);
  comm.allreduce(view(a));
  const float ranks_sum = static_cast<float>(p * (p + 1) / 2);
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == ranks_sum * static_cast<float>(i));

  std::vector<std::int32_t> x(5, r), y(5, -1);
  comm.allreduce(view(x), view(y), reduce_op::max);
  CHECK(y == std::vector<std::int32_t>(5, p - 1));

  std::vector<double> g1(3, 1.0);
  std::vector<std::int64_t> g2(2, r);
  const std::vector<tensor_view> group = {view(g1), view(g2)};
  comm.allreduce(group);
  CHECK(g1 == std::vector<double>(3, p));
  CHECK(g2 == std::vector<std::int64_t>(2, p * (p - 1) / 2));

  std::vector<std::int32_t> in(3 * pp, 1), out(3, 0);
  comm.reduce_scatter(view(in), view(out));
  CHECK(out == std::vector<std::int32_t>(3, p));

  std::vector<std::int32_t> mine(2, r), all(2 * pp, -1);
  comm.allgather(view(mine), view(all));
  for (int q = 0; q < p; ++q) CHECK(all[2 * static_cast<std::size_t>(q)] == q);

  std::vector<std::int32_t> b(4, r);
  comm.broadcast(view(b), p - 1);
  CHECK(b == std::vector<std::int32_t>(4, p - 1));
  comm.barrier();

  // count 0 with a null pointer is a valid, empty call.
  comm.allreduce(tensor_view{nullptr, 0, dtype::f32});
  comm.broadcast(tensor_view{nullptr, 0, dtype::f32}, 0);
}

}  // namespace

TEST_CASE_TEMPLATE("communicator: bad arguments raise invalid_argument_error and do no harm", S,
                   strategy::ring, strategy::tree, strategy::parameter_server, strategy::automatic,
                   strategy::native) {
  for (int p : {2, 3}) {
    CAPTURE(p);
    local_world w(p);
    w.run([](local_backend b) {
      communicator<local_backend, S> comm(b, test_config());
      make_bad_calls(comm);
      make_good_calls(comm);
      // Bad calls on one rank only, between collectives, leave the others unaffected too.
      if (comm.rank() == 1) make_bad_calls(comm);
      make_good_calls(comm);
    });
  }
}

TEST_CASE("communicator: a dtype mismatch message says which tensor is the input") {
  local_world w(1);
  communicator<local_backend, strategy::ring> comm(w.backend(0), test_config());
  std::vector<float> f(4, 1.0f);
  std::vector<std::int32_t> i(4, 1);
  for (const std::string& m :
       {error_of<invalid_argument_error>([&] { comm.allreduce(view(f), view(i)); }),
        error_of<invalid_argument_error>([&] { comm.reduce_scatter(view(f), view(i)); }),
        error_of<invalid_argument_error>([&] { comm.allgather(view(f), view(i)); })}) {
    CHECK_HAS(m, "input is f32");
    CHECK_HAS(m, "output is i32");
  }
}

TEST_CASE("communicator: a transport failure poisons the communicator; peers fail fast") {
  // Rank 0 reduces 10 floats, ranks 1 and 2 reduce 11. With 3 ranks the ring chunks are 4,3,3
  // and 4,4,3: rank 2 sends rank 0 a 16-byte chunk where rank 0 expects 12 bytes (mismatch),
  // while rank 1's own messages all match, so rank 1 only learns of the failure from the abort.
  // The mismatch check is off here: with it, no message of that allreduce would be sent (tested
  // in the backend suite, tests/backends/mismatch.hpp).
  local_world w(3);
  std::string kind[3], first[3], later[3], later_barrier[3];
  double took[3] = {};
  w.run([&](local_backend b) {
    const auto r = static_cast<std::size_t>(b.rank());
    config c = test_config();
    c.mismatch_check = false;
    communicator<local_backend, strategy::ring> comm(b, c);
    std::vector<float> v(b.rank() == 0 ? 10 : 11, 1.0f);
    const auto t0 = clock::now();
    try {
      comm.allreduce(view(v));
      kind[r] = "no error";
    } catch (const mismatch_error& e) {
      kind[r] = "mismatch";
      first[r] = e.what();
    } catch (const peer_lost_error& e) {
      kind[r] = "peer_lost";
      first[r] = e.what();
    } catch (const timeout_error& e) {
      kind[r] = "timeout";
      first[r] = e.what();
    }
    took[r] = seconds_since(t0);
    // A correct call is now refused at once, naming the earlier failure.
    std::vector<float> ok(10, 1.0f);
    later[r] = error_of<error>([&] { comm.allreduce(view(ok)); });
    later_barrier[r] = error_of<error>([&] { comm.barrier(); });
    // Argument errors are still reported as such.
    CHECK_THROWS_AS(comm.broadcast(view(ok), 7), invalid_argument_error);
  });
  int mismatches = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    CAPTURE(first[r]);
    CHECK((kind[r] == "mismatch" || kind[r] == "peer_lost"));
    if (kind[r] == "mismatch") ++mismatches;
    CHECK(took[r] < 1.5);  // long before the 2 s timeout
    CHECK_HAS(later[r],
              "allreduce: this communicator is unusable since an earlier collective "
              "failed");
    CHECK_HAS(later[r], first[r]);
    CHECK_HAS(later_barrier[r], "barrier: this communicator is unusable");
  }
  CHECK(mismatches >= 1);
  CHECK(kind[1] == "peer_lost");
  CHECK_HAS(first[0] + first[1] + first[2], "size mismatch");
}

TEST_CASE("communicator: a timeout poisons the communicator too") {
  local_world w(2);
  std::string first, later;
  double took = 0;
  w.run([&](local_backend b) {
    if (b.rank() == 1) return;  // never joins
    config c = test_config();
    c.timeout = 1s;
    communicator<local_backend, strategy::ring> comm(b, c);
    std::vector<float> v(8, 1.0f);
    const auto t0 = clock::now();
    first = error_of<timeout_error>([&] { comm.allreduce(view(v)); });
    took = seconds_since(t0);
    later = error_of<error>([&] { comm.allreduce(view(v)); });
  });
  CHECK_HAS(first, "rank 1");
  CHECK(took >= 0.99);
  CHECK(took < 1.5);
  CHECK_HAS(later, "unusable since an earlier collective failed");
  CHECK_HAS(later, "did not complete before the deadline");
}
