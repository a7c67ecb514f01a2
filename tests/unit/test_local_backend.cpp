// The backend contract (include/distcomm/backend.hpp) on the local backend, driven through
// local_world / local_backend directly, and the local backend's shared-memory collectives.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
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

// Deadline for waits that are expected to succeed: generous, they never reach it.
deadline soon() { return deadline_after(2s); }

double seconds_since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

// Runs f and returns the message of the E it throws ("<no exception>" when it throws nothing);
// any other exception propagates and fails the test.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

// A value every rank can compute for (rank, index).
std::int32_t value(int rank, std::size_t i) {
  return (rank + 1) * 10 + static_cast<std::int32_t>(i % 7) - 3;
}

}  // namespace

// ---- point to point ------------------------------------------------------------------------

TEST_CASE("local: send posted before the receive delivers the message") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  CHECK(b0.rank() == 0);
  CHECK(b1.rank() == 1);
  CHECK(b1.size() == 2);
  const std::vector<std::int32_t> src = {1, -2, 3, 4};
  std::vector<std::int32_t> dst(4, 0);
  auto s = b0.isend(src.data(), 16, 1, 7);
  CHECK_FALSE(s.test());  // queued until the receive arrives
  auto r = b1.irecv(dst.data(), 16, 0, 7);
  CHECK(r.test());
  CHECK(s.test());
  r.wait(soon());
  s.wait(soon());
  CHECK(dst == src);
}

TEST_CASE("local: receive posted before the send delivers the message") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  const std::vector<std::int32_t> src = {9, 8, 7};
  std::vector<std::int32_t> dst(3, 0);
  auto r = b1.irecv(dst.data(), 12, 0, 7);
  CHECK_FALSE(r.test());
  CHECK(dst == std::vector<std::int32_t>(3, 0));
  auto s = b0.isend(src.data(), 12, 1, 7);
  s.wait(soon());
  r.wait(soon());
  CHECK(dst == src);
}

TEST_CASE("local: a rank can send to itself, and an empty request is complete") {
  local_world w(1);
  local_backend b = w.backend(0);
  int in = 42;
  int out = 0;
  auto r = b.irecv(&out, sizeof out, 0, 1);
  auto s = b.isend(&in, sizeof in, 0, 1);
  r.wait(soon());
  s.wait(soon());
  CHECK(out == 42);
  local_request empty;
  CHECK(empty.test());
  empty.wait(clock::now());  // already past: must not throw
}

TEST_CASE("local: messages with the same peer and tag match in posting order") {
  local_world w(3);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  constexpr int n = 5;

  SUBCASE("sends first") {
    std::vector<std::int32_t> src(n), dst(n, -1);
    std::vector<local_request> sends, recvs;
    for (int i = 0; i < n; ++i) {
      src[static_cast<std::size_t>(i)] = 100 + i;
      sends.push_back(b0.isend(&src[static_cast<std::size_t>(i)], 4, 1, 3));
    }
    for (int i = 0; i < n; ++i)
      recvs.push_back(b1.irecv(&dst[static_cast<std::size_t>(i)], 4, 0, 3));
    for (auto& r : recvs) r.wait(soon());
    for (auto& s : sends) s.wait(soon());
    CHECK(dst == src);
  }
  SUBCASE("receives first") {
    std::vector<std::int32_t> src(n), dst(n, -1);
    std::vector<local_request> sends, recvs;
    for (int i = 0; i < n; ++i)
      recvs.push_back(b1.irecv(&dst[static_cast<std::size_t>(i)], 4, 0, 3));
    for (int i = 0; i < n; ++i) {
      src[static_cast<std::size_t>(i)] = 200 + i;
      sends.push_back(b0.isend(&src[static_cast<std::size_t>(i)], 4, 1, 3));
    }
    for (auto& r : recvs) r.wait(soon());
    for (auto& s : sends) s.wait(soon());
    CHECK(dst == src);
  }
  SUBCASE("interleaved with another sender on the same tag") {
    local_backend b2 = w.backend(2);
    std::int32_t a0 = 1, a1 = 2, c0 = 31, c1 = 32;
    std::int32_t from0[2] = {}, from2[2] = {};
    auto s1 = b2.isend(&c0, 4, 1, 3);
    auto s2 = b0.isend(&a0, 4, 1, 3);
    auto s3 = b2.isend(&c1, 4, 1, 3);
    auto s4 = b0.isend(&a1, 4, 1, 3);
    auto r1 = b1.irecv(&from0[0], 4, 0, 3);
    auto r2 = b1.irecv(&from2[0], 4, 2, 3);
    auto r3 = b1.irecv(&from0[1], 4, 0, 3);
    auto r4 = b1.irecv(&from2[1], 4, 2, 3);
    for (auto* r : {&r1, &r2, &r3, &r4, &s1, &s2, &s3, &s4}) r->wait(soon());
    CHECK(from0[0] == 1);
    CHECK(from0[1] == 2);
    CHECK(from2[0] == 31);
    CHECK(from2[1] == 32);
  }
}

TEST_CASE("local: different tags or peers do not match each other") {
  local_world w(3);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  local_backend b2 = w.backend(2);
  std::int32_t one = 1, two = 2, got1 = 0, got2 = 0;
  auto s1 = b0.isend(&one, 4, 1, 1);
  auto r2 = b1.irecv(&got2, 4, 0, 2);
  CHECK_FALSE(s1.test());
  CHECK_FALSE(r2.test());
  // Same tag, wrong source: rank 2's message must not satisfy a receive from rank 0.
  std::int32_t other = 99;
  auto s_other = b2.isend(&other, 4, 1, 2);
  CHECK_FALSE(r2.test());
  CHECK_FALSE(s_other.test());
  auto s2 = b0.isend(&two, 4, 1, 2);
  r2.wait(soon());
  s2.wait(soon());
  CHECK(got2 == 2);
  CHECK_FALSE(s1.test());  // still waiting for a tag-1 receive
  auto r1 = b1.irecv(&got1, 4, 0, 1);
  r1.wait(soon());
  s1.wait(soon());
  CHECK(got1 == 1);
  std::int32_t got_other = 0;
  auto r_other = b1.irecv(&got_other, 4, 2, 2);
  r_other.wait(soon());
  s_other.wait(soon());
  CHECK(got_other == 99);
}

TEST_CASE("local: zero-byte messages complete in both orders") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  auto s = b0.isend(nullptr, 0, 1, 4);
  CHECK_FALSE(s.test());  // a zero-byte message is still a message: it needs its receive
  auto r = b1.irecv(nullptr, 0, 0, 4);
  CHECK(r.test());
  CHECK(s.test());
  auto r2 = b1.irecv(nullptr, 0, 0, 4);
  auto s2 = b0.isend(nullptr, 0, 1, 4);
  r2.wait(soon());
  s2.wait(soon());
  // A zero-byte receive still consumes exactly one message: the next one goes elsewhere.
  std::int32_t x = 5, y = 0;
  auto s3 = b0.isend(&x, 4, 1, 4);
  auto r3 = b1.irecv(&y, 4, 0, 4);
  r3.wait(soon());
  s3.wait(soon());
  CHECK(y == 5);
}

TEST_CASE("local: a size mismatch fails both sides with mismatch_error naming ranks and sizes") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  std::int64_t src = 7;
  std::int32_t dst = 0;
  auto check_message = [](const std::string& m) {
    CHECK_HAS(m, "rank 0");
    CHECK_HAS(m, "8 bytes");
    CHECK_HAS(m, "rank 1");
    CHECK_HAS(m, "4 bytes");
  };
  SUBCASE("send first") {
    auto s = b0.isend(&src, 8, 1, 3);
    auto r = b1.irecv(&dst, 4, 0, 3);
    check_message(error_of<mismatch_error>([&] { r.wait(soon()); }));
    check_message(error_of<mismatch_error>([&] { s.test(); }));
    check_message(error_of<mismatch_error>([&] { s.wait(soon()); }));
  }
  SUBCASE("receive first") {
    auto r = b1.irecv(&dst, 4, 0, 3);
    auto s = b0.isend(&src, 8, 1, 3);
    check_message(error_of<mismatch_error>([&] { s.wait(soon()); }));
    check_message(error_of<mismatch_error>([&] { r.test(); }));
  }
  CHECK(dst == 0);  // no truncated copy
}

TEST_CASE("local: a receive nobody sends times out at its deadline, naming peer and bytes") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  std::int32_t buf[4] = {};
  auto r = b0.irecv(buf, 16, 1, 6);
  const auto t0 = clock::now();
  const std::string m = error_of<timeout_error>([&] { r.wait(deadline_after(1s)); });
  const double took = seconds_since(t0);
  CHECK(took >= 0.99);
  CHECK(took < 1.5);
  CHECK_HAS(m, "from rank 1");
  CHECK_HAS(m, "16 bytes");
  CHECK_HAS(m, "tag 6");
  CHECK_HAS(m, "DISTCOMM_TIMEOUT");
  // The timed-out receive is gone: a later send stays unmatched and does not write into buf.
  const std::int32_t src[4] = {1, 2, 3, 4};
  auto s = b1.isend(src, 16, 0, 6);
  CHECK_FALSE(s.test());
  CHECK(buf[0] == 0);
  std::int32_t again[4] = {};
  auto r2 = b0.irecv(again, 16, 1, 6);
  r2.wait(soon());
  s.wait(soon());
  CHECK(again[3] == 4);
}

TEST_CASE("local: a send nobody receives times out naming the destination") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  std::int64_t x = 1;
  auto s = b0.isend(&x, 8, 1, 2);
  const std::string m = error_of<timeout_error>([&] { s.wait(clock::now()); });
  CHECK_HAS(m, "to rank 1");
  CHECK_HAS(m, "8 bytes");
}

TEST_CASE("local: destroying a pending request cancels it") {
  local_world w(2);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);

  SUBCASE("receive: a later send never writes into the freed buffer") {
    auto buf = std::make_unique<std::int32_t[]>(4);
    {
      auto r = b1.irecv(buf.get(), 16, 0, 5);
      CHECK_FALSE(r.test());
    }             // cancelled here
    buf.reset();  // under AddressSanitizer a later write into it would be reported
    const std::int32_t src[4] = {5, 6, 7, 8};
    auto s = b0.isend(src, 16, 1, 5);
    CHECK_FALSE(s.test());  // nothing matched it: the cancelled receive is gone
    std::int32_t dst[4] = {};
    auto r2 = b1.irecv(dst, 16, 0, 5);
    r2.wait(soon());
    s.wait(soon());
    CHECK(dst[0] == 5);
    CHECK(dst[3] == 8);
  }
  SUBCASE("send: a later receive does not get the cancelled message") {
    auto buf = std::make_unique<std::int32_t[]>(1);
    buf[0] = 1;
    { auto s = b0.isend(buf.get(), 4, 1, 5); }
    buf.reset();
    std::int32_t two = 2, got = 0;
    auto r = b1.irecv(&got, 4, 0, 5);
    CHECK_FALSE(r.test());
    auto s2 = b0.isend(&two, 4, 1, 5);
    r.wait(soon());
    s2.wait(soon());
    CHECK(got == 2);
  }
  SUBCASE("move assignment cancels the request it overwrites") {
    std::int32_t first = -1, second = -1;
    auto r = b1.irecv(&first, 4, 0, 5);
    r = b1.irecv(&second, 4, 0, 5);
    std::int32_t v = 77;
    auto s = b0.isend(&v, 4, 1, 5);
    r.wait(soon());
    s.wait(soon());
    CHECK(second == 77);
    CHECK(first == -1);
  }
}

// ---- abort and local_world::run --------------------------------------------------------------

TEST_CASE("local: abort makes other ranks' pending waits throw peer_lost_error at once") {
  local_world w(3);
  std::string msg[3];
  double took[3] = {};
  w.run([&](local_backend b) {
    const auto r = static_cast<std::size_t>(b.rank());
    if (b.rank() == 0) {
      std::this_thread::sleep_for(50ms);
      b.abort("disk on fire");
      return;
    }
    const auto t0 = clock::now();
    if (b.rank() == 1) {
      std::int32_t x = 0;
      auto req = b.irecv(&x, 4, 0, 1);
      msg[r] = error_of<peer_lost_error>([&] { req.wait(soon()); });
    } else {
      msg[r] = error_of<peer_lost_error>([&] { b.native_barrier(soon()); });
    }
    took[r] = seconds_since(t0);
  });
  for (int r = 1; r < 3; ++r) {
    CAPTURE(r);
    CHECK_HAS(msg[r], "rank 0 failed");
    CHECK_HAS(msg[r], "disk on fire");
    CHECK(took[r] < 1.0);  // far below the 2 s deadline
  }
}

TEST_CASE("local: after abort every call fails with the first reason") {
  local_world w(3);
  local_backend b0 = w.backend(0);
  local_backend b1 = w.backend(1);
  local_backend b2 = w.backend(2);
  std::int32_t x = 0;
  auto pending = b2.irecv(&x, 4, 1, 1);
  b0.abort("first");
  b1.abort("second");
  const std::string m = error_of<peer_lost_error>([&] { (void)pending.test(); });
  CHECK_HAS(m, "rank 0 failed: first");
  CHECK(m.find("second") == std::string::npos);
  CHECK_HAS(error_of<peer_lost_error>([&] { auto r = b2.isend(&x, 4, 1, 1); }), "first");
  CHECK_HAS(error_of<peer_lost_error>([&] { auto r = b2.irecv(&x, 4, 1, 1); }), "first");
  CHECK_HAS(error_of<peer_lost_error>([&] { b2.native_barrier(soon()); }), "first");
}

TEST_CASE("local: run rethrows the first exception and does not hang the waiting ranks") {
  local_world w(4);
  std::atomic<int> failed_fast{0};
  // Rank 1 throws at once; the others are waiting for it in a native barrier, a receive and a
  // ring allreduce, each with a 2 s deadline.
  const auto body = [&](local_backend b) {
    if (b.rank() == 1) throw std::runtime_error("rank one gave up");
    try {
      if (b.rank() == 0) {
        b.native_barrier(soon());
      } else if (b.rank() == 2) {
        std::int32_t x = 0;
        auto r = b.irecv(&x, 4, 1, 9);
        r.wait(soon());
      } else {
        config c;
        c.timeout = 2s;
        communicator<local_backend, strategy::ring> comm(b, c);
        std::vector<float> v(100, 1.0f);
        comm.allreduce(view(v));
      }
    } catch (const peer_lost_error&) {
      ++failed_fast;
      throw;
    }
  };
  const auto t0 = clock::now();
  CHECK_THROWS_WITH_AS(w.run(body), "rank one gave up", std::runtime_error);
  CHECK(seconds_since(t0) < 1.5);
  CHECK(failed_fast == 3);

  // A non-std exception is rethrown too.
  local_world w2(2);
  const auto throws_int = [](local_backend b) {
    if (b.rank() == 0) throw 42;
    b.native_barrier(soon());
  };
  CHECK_THROWS_AS(w2.run(throws_int), int);
}

TEST_CASE("local: run calls the body once per rank") {
  local_world w(5);
  std::atomic<int> calls[5] = {};
  w.run([&](local_backend b) {
    CHECK(b.size() == 5);
    ++calls[b.rank()];
  });
  for (auto& c : calls) CHECK(c == 1);
  CHECK(w.size() == 5);
}

TEST_CASE("local: invalid peers, roots and world sizes raise invalid_argument_error") {
  local_world w(2);
  local_backend b = w.backend(0);
  int x = 0;
  CHECK_HAS(error_of<invalid_argument_error>([&] { auto r = b.isend(&x, 4, -1, 0); }), "-1");
  CHECK_HAS(error_of<invalid_argument_error>([&] { auto r = b.isend(&x, 4, 2, 0); }), "2");
  CHECK_HAS(error_of<invalid_argument_error>([&] { auto r = b.irecv(&x, 4, -1, 0); }), "-1");
  CHECK_HAS(error_of<invalid_argument_error>([&] { auto r = b.irecv(&x, 4, 2, 0); }), "size 2");
  CHECK_THROWS_AS(b.native_broadcast(&x, 1, dtype::i32, 2, soon()), invalid_argument_error);
  CHECK_THROWS_AS(b.native_broadcast(&x, 1, dtype::i32, -1, soon()), invalid_argument_error);
  CHECK_THROWS_AS((void)w.backend(-1), invalid_argument_error);
  CHECK_THROWS_AS((void)w.backend(2), invalid_argument_error);
  CHECK_HAS(error_of<invalid_argument_error>([] { local_world bad(0); }), "size 0");
  CHECK_THROWS_AS(local_world(-3), invalid_argument_error);
}

// ---- native collectives ----------------------------------------------------------------------

TEST_CASE("local: native collectives for 1..5 ranks, in place and out of place") {
  for (int p = 1; p <= 5; ++p) {
    for (std::size_t n :
         {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{13}, std::size_t{1000}}) {
      CAPTURE(p);
      CAPTURE(n);
      const auto pp = static_cast<std::size_t>(p);
      // Per rank: every result the rank computed, checked here on the main thread.
      struct results {
        std::vector<std::int32_t> sum, sum_inplace, max, min, avg, rs, rs_inplace, ag, ag_inplace;
        std::vector<double> dsum;
        std::vector<std::vector<std::int32_t>> bcast;  // by root
        bool barrier_ok = true;
      };
      std::vector<results> res(pp);
      std::atomic<int> arrived{0};
      local_world w(p);
      w.run([&](local_backend b) {
        const int r = b.rank();
        results& out = res[static_cast<std::size_t>(r)];
        const auto until = soon();
        std::vector<std::int32_t> in(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = value(r, i);

        out.sum.assign(n, -1);
        b.native_allreduce(in.data(), out.sum.data(), n, dtype::i32, reduce_op::sum, until);
        out.sum_inplace = in;
        b.native_allreduce(out.sum_inplace.data(), out.sum_inplace.data(), n, dtype::i32,
                           reduce_op::sum, until);
        out.max.assign(n, -1);
        b.native_allreduce(in.data(), out.max.data(), n, dtype::i32, reduce_op::max, until);
        out.min.assign(n, -1);
        b.native_allreduce(in.data(), out.min.data(), n, dtype::i32, reduce_op::min, until);
        out.avg = in;
        b.native_allreduce(out.avg.data(), out.avg.data(), n, dtype::i32, reduce_op::avg, until);
        std::vector<double> din(n);
        for (std::size_t i = 0; i < n; ++i) din[i] = value(r, i) / 4.0;
        out.dsum.assign(n, -1.0);
        b.native_allreduce(din.data(), out.dsum.data(), n, dtype::f64, reduce_op::sum, until);

        // reduce_scatter: n elements per rank out of n * p.
        std::vector<std::int32_t> big(n * pp);
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = value(r, i);
        out.rs.assign(n, -1);
        b.native_reduce_scatter(big.data(), out.rs.data(), n, dtype::i32, reduce_op::sum, until);
        std::vector<std::int32_t> big2 = big;  // in place: out is this rank's block of in
        std::int32_t* own = big2.data() + static_cast<std::size_t>(r) * n;
        b.native_reduce_scatter(big2.data(), own, n, dtype::i32, reduce_op::sum, until);
        out.rs_inplace.assign(own, own + n);

        // allgather: n elements from each rank.
        out.ag.assign(n * pp, -1);
        b.native_allgather(in.data(), out.ag.data(), n, dtype::i32, until);
        out.ag_inplace.assign(n * pp, -1);
        std::copy(in.begin(), in.end(), out.ag_inplace.begin() + static_cast<long>(r * n));
        b.native_allgather(out.ag_inplace.data() + static_cast<std::size_t>(r) * n,
                           out.ag_inplace.data(), n, dtype::i32, until);

        for (int root = 0; root < p; ++root) {
          std::vector<std::int32_t> data = in;
          b.native_broadcast(data.data(), n, dtype::i32, root, until);
          out.bcast.push_back(data);
        }

        for (int round = 1; round <= 3; ++round) {
          ++arrived;
          b.native_barrier(until);
          if (arrived.load() < round * p) out.barrier_ok = false;
          b.native_barrier(until);  // nobody starts the next round before all have checked
        }
      });

      for (int r = 0; r < p; ++r) {
        CAPTURE(r);
        const results& got = res[static_cast<std::size_t>(r)];
        std::vector<std::int32_t> sum(n), max(n), min(n), avg(n), rs(n), ag(n * pp);
        std::vector<double> dsum(n);
        for (std::size_t i = 0; i < n; ++i) {
          std::int32_t s = 0, hi = value(0, i), lo = value(0, i);
          double d = 0;
          for (int q = 0; q < p; ++q) {
            s += value(q, i);
            hi = std::max(hi, value(q, i));
            lo = std::min(lo, value(q, i));
            d += value(q, i) / 4.0;
          }
          sum[i] = s;
          max[i] = hi;
          min[i] = lo;
          avg[i] = s / p;
          dsum[i] = d;
          std::int32_t srs = 0;
          for (int q = 0; q < p; ++q) srs += value(q, static_cast<std::size_t>(r) * n + i);
          rs[i] = srs;
        }
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < n; ++i) ag[static_cast<std::size_t>(q) * n + i] = value(q, i);
        }
        CHECK(got.sum == sum);
        CHECK(got.sum_inplace == sum);
        CHECK(got.max == max);
        CHECK(got.min == min);
        CHECK(got.avg == avg);
        CHECK(got.dsum == dsum);
        CHECK(got.rs == rs);
        CHECK(got.rs_inplace == rs);
        CHECK(got.ag == ag);
        CHECK(got.ag_inplace == ag);
        REQUIRE(got.bcast.size() == pp);
        for (int root = 0; root < p; ++root) {
          CAPTURE(root);
          std::vector<std::int32_t> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = value(root, i);
          CHECK(got.bcast[static_cast<std::size_t>(root)] == want);
        }
        CHECK(got.barrier_ok);
      }
    }
  }
}

TEST_CASE("local: a native barrier one rank never reaches times out naming that rank") {
  local_world w(3);
  std::string msg[3];
  double took[3] = {};
  std::atomic<int> gave_up{0};
  w.run([&](local_backend b) {
    const auto r = static_cast<std::size_t>(b.rank());
    if (b.rank() == 2) {
      // Arrives only after the others gave up: it must not pass the barrier alone either.
      const auto until = deadline_after(2s);
      while (gave_up.load() < 2 && clock::now() < until) std::this_thread::sleep_for(10ms);
      msg[r] = error_of<timeout_error>([&] { b.native_barrier(deadline_after(200ms)); });
      return;
    }
    const auto t0 = clock::now();
    msg[r] = error_of<timeout_error>([&] { b.native_barrier(deadline_after(1s)); });
    took[r] = seconds_since(t0);
    ++gave_up;
  });
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK_HAS(msg[r], "waiting for rank(s) 2 ");
    CHECK_HAS(msg[r], "native barrier");
    CHECK(took[r] >= 0.99);
    CHECK(took[r] < 1.5);
  }
  CHECK_HAS(msg[2], "rank 2 timed out in native barrier waiting for rank(s) 0, 1, which timed out");
}
