// The UCX backend under distcomm-run (2 and 3 processes, default transports and TCP on lo): the
// point-to-point contract (ordered matching, size mismatch, timeout naming peer/tag/bytes,
// zero-byte messages, cancelling a pending receive) and every point-to-point strategy x dtype x op
// x count, in and out of place, against exact expected values and bitwise equal across ranks.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distcomm/backends/ucx.hpp"
#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace dc = distcomm;

// UCP has no collectives: strategy::native must not compile with this backend.
static_assert(!dc::has_native_allreduce_v<dc::ucx_backend>);

namespace {

dc::job* the_job = nullptr;
int barrier_seq = 0;

// Every rank runs the same test cases in the same order, so a counter names each barrier.
void sync_all() {
  dc::store_barrier(*the_job->kv, "test_ucx/" + std::to_string(barrier_seq++), the_job->world.rank,
                    the_job->world.size);
}

dc::deadline soon() { return dc::deadline_after(std::chrono::seconds(30)); }

// ---- typed access -----------------------------------------------------------------------------

double get(const void* p, std::size_t i, dc::dtype t) {
  switch (t) {
    case dc::dtype::f16:
      return static_cast<float>(static_cast<const dc::f16*>(p)[i]);
    case dc::dtype::bf16:
      return static_cast<float>(static_cast<const dc::bf16*>(p)[i]);
    case dc::dtype::f32:
      return static_cast<const float*>(p)[i];
    case dc::dtype::f64:
      return static_cast<const double*>(p)[i];
    case dc::dtype::i8:
      return static_cast<const std::int8_t*>(p)[i];
    case dc::dtype::u8:
      return static_cast<const std::uint8_t*>(p)[i];
    case dc::dtype::i32:
      return static_cast<const std::int32_t*>(p)[i];
    case dc::dtype::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
  }
  return 0;
}

void put(void* p, std::size_t i, dc::dtype t, std::int64_t v) {
  switch (t) {
    case dc::dtype::f16:
      static_cast<dc::f16*>(p)[i] = dc::f16(static_cast<float>(v));
      return;
    case dc::dtype::bf16:
      static_cast<dc::bf16*>(p)[i] = dc::bf16(static_cast<float>(v));
      return;
    case dc::dtype::f32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case dc::dtype::f64:
      static_cast<double*>(p)[i] = static_cast<double>(v);
      return;
    case dc::dtype::i8:
      static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      return;
    case dc::dtype::u8:
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
      return;
    case dc::dtype::i32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      return;
    case dc::dtype::i64:
      static_cast<std::int64_t*>(p)[i] = v;
      return;
  }
}

// Integer inputs small enough that every dtype holds every partial result exactly (f16 and bf16
// included); avg inputs are multiples of p so the average is exact too.
std::int64_t input(int rank, std::size_t i, dc::dtype t, dc::reduce_op op, int p) {
  const auto h =
      static_cast<std::int64_t>((i * 2654435761u + static_cast<std::size_t>(rank) * 40503u) % 97);
  const bool is_unsigned = t == dc::dtype::u8;
  switch (op) {
    case dc::reduce_op::prod:
      return is_unsigned ? 1 + h % 2 : (h % 3) - 1 + (h % 3 == 1 ? 2 : 0);  // {-1, 2, 1}
    case dc::reduce_op::avg:
      return p * (is_unsigned ? h % 6 : h % 7 - 3);
    default:
      return is_unsigned ? h % 40 : h % 41 - 20;
  }
}

std::int64_t expected(std::size_t i, dc::dtype t, dc::reduce_op op, int p) {
  std::int64_t acc = input(0, i, t, op, p);
  for (int r = 1; r < p; ++r) {
    const std::int64_t x = input(r, i, t, op, p);
    switch (op) {
      case dc::reduce_op::sum:
      case dc::reduce_op::avg:
        acc += x;
        break;
      case dc::reduce_op::prod:
        acc *= x;
        break;
      case dc::reduce_op::min:
        acc = std::min(acc, x);
        break;
      case dc::reduce_op::max:
        acc = std::max(acc, x);
        break;
    }
  }
  return op == dc::reduce_op::avg ? acc / p : acc;
}

std::uint64_t fnv(std::uint64_t h, const unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <class S>
void all_cases(const char* strategy) {
  const int p = the_job->world.size;
  const int me = the_job->world.rank;
  dc::config cfg = dc::config::from_env();
  cfg.timeout = std::chrono::seconds(60);
  cfg.segment_bytes = 16 << 10;  // several segments at the larger counts
  // automatic: both halves of the table at test sizes.
  cfg.algo = dc::algo_table::parse("tree:0-1K;ring:1K-16K;ps:16K-max", "test");
  dc::communicator<dc::ucx_backend, S> comm(dc::ucx_backend(*the_job), cfg);
  REQUIRE(comm.rank() == me);
  REQUIRE(comm.size() == p);
  std::uint64_t hash = 0xcbf29ce484222325ull;
  std::size_t wrong_cases = 0;
  for (dc::dtype t : dc::all_dtypes) {
    for (dc::reduce_op op : dc::all_reduce_ops) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000},
                                std::size_t{100003}}) {
        for (bool in_place : {true, false}) {
          const std::size_t bytes = count * dc::dtype_size(t);
          std::vector<unsigned char> in(bytes + 1, 0x5a);
          for (std::size_t i = 0; i < count; ++i) put(in.data(), i, t, input(me, i, t, op, p));
          const std::vector<unsigned char> original = in;
          std::vector<unsigned char> out(bytes + 1, 0xab);
          dc::tensor_view vin{in.data(), count, t};
          if (in_place) {
            comm.allreduce(vin, op);
          } else {
            comm.allreduce(vin, dc::tensor_view{out.data(), count, t}, op);
            CHECK_MESSAGE(in == original, strategy << ": out of place modified its input");
          }
          const std::vector<unsigned char>& res = in_place ? in : out;
          CHECK_MESSAGE(res[bytes] == (in_place ? 0x5a : 0xab), strategy << ": wrote past the end");
          std::size_t wrong = 0;
          std::string first;
          for (std::size_t i = 0; i < count; ++i) {
            const auto want = static_cast<double>(expected(i, t, op, p));
            const double got = get(res.data(), i, t);
            if (got != want && wrong++ == 0) {
              first = "element " + std::to_string(i) + ": got " + std::to_string(got) +
                      ", expected " + std::to_string(want);
            }
          }
          if (wrong != 0) ++wrong_cases;
          CHECK_MESSAGE(wrong == 0, strategy << " " << dc::to_string(t) << " " << dc::to_string(op)
                                             << " count " << count
                                             << (in_place ? " in place: " : " out of place: ")
                                             << wrong << " wrong, " << first);
          hash = fnv(hash, res.data(), bytes);
        }
      }
    }
  }
  // Bitwise agreement: every rank's hash of every result equals rank 0's.
  const std::string key = std::string("test_ucx/hash/") + strategy + "/";
  dc::bytes mine(reinterpret_cast<const std::uint8_t*>(&hash),
                 reinterpret_cast<const std::uint8_t*>(&hash) + sizeof hash);
  the_job->kv->set(key + std::to_string(me), mine);
  CHECK_MESSAGE(the_job->kv->get(key + "0") == mine,
                strategy << ": rank " << me << " differs bitwise from rank 0");
  CHECK(wrong_cases == 0);
}

}  // namespace

TEST_CASE("ucx point-to-point contract") {
  const int p = the_job->world.size;
  const int me = the_job->world.rank;
  REQUIRE(p >= 2);
  dc::ucx_backend b(*the_job);
  CHECK(std::string(dc::ucx_backend::name) == "ucx");
  CHECK(b.rank() == me);
  CHECK(b.size() == p);

  {  // an empty request is complete
    dc::ucx_request empty;
    CHECK(empty.test());
    empty.wait(soon());
    empty.wait(soon());
  }

  // Rank 0 sends five messages with one tag (different sizes too) and two with another to every
  // peer; each peer receives the second tag first, then the first tag's messages in order.
  std::vector<std::int64_t> first_tag[5];
  std::int64_t second_tag[2] = {0, 0};
  if (me == 0) {
    std::vector<dc::ucx_request> reqs;
    for (int k = 0; k < 5; ++k) {
      first_tag[k].assign(static_cast<std::size_t>(1 + k * 5000), 100 + k);
    }
    second_tag[0] = 7;
    second_tag[1] = 8;
    for (int peer = 1; peer < p; ++peer) {
      for (int k = 0; k < 5; ++k) {
        reqs.push_back(b.isend(first_tag[k].data(), first_tag[k].size() * 8, peer, 11));
      }
      for (int k = 0; k < 2; ++k) reqs.push_back(b.isend(&second_tag[k], 8, peer, 12));
      reqs.push_back(b.isend(nullptr, 0, peer, 13));
    }
    for (auto& r : reqs) r.wait(soon());
  } else {
    std::int64_t got2[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      auto r = b.irecv(&got2[k], 8, 0, 12);
      r.wait(soon());
      r.wait(soon());  // waiting a completed request is a no-op
    }
    CHECK(got2[0] == 7);
    CHECK(got2[1] == 8);
    std::vector<dc::ucx_request> reqs;
    for (int k = 0; k < 5; ++k) {
      first_tag[k].assign(static_cast<std::size_t>(1 + k * 5000), -1);
      reqs.push_back(b.irecv(first_tag[k].data(), first_tag[k].size() * 8, 0, 11));
    }
    for (auto& r : reqs) r.wait(soon());
    for (int k = 0; k < 5; ++k) {
      CHECK(first_tag[k].front() == 100 + k);
      CHECK(first_tag[k].back() == 100 + k);
    }
    auto z = b.irecv(nullptr, 0, 0, 13);
    z.wait(soon());
  }
  sync_all();

  // Size mismatch, both ways, between ranks 0 and 1: mismatch_error on the receiver, never a
  // truncated or partial success.
  if (me == 0) {
    std::vector<unsigned char> big(64, 1), small(4, 2), huge(200000, 3);
    auto a = b.isend(big.data(), big.size(), 1, 21);
    auto c = b.isend(small.data(), small.size(), 1, 22);
    auto d = b.isend(huge.data(), huge.size(), 1, 23);
    a.wait(soon());
    c.wait(soon());
    // A large (rendezvous) send the receiver truncates may complete or fail; only the receiver
    // must report the mismatch.
    try {
      d.wait(soon());
    } catch (const dc::error&) {
    }
  } else if (me == 1) {
    std::vector<unsigned char> buf(32, 0), huge(100000, 0);
    auto a = b.irecv(buf.data(), buf.size(), 0, 21);
    CHECK_THROWS_AS(a.wait(soon()), dc::mismatch_error);
    auto c = b.irecv(buf.data(), buf.size(), 0, 22);
    CHECK_THROWS_AS(c.wait(soon()), dc::mismatch_error);
    auto d = b.irecv(huge.data(), huge.size(), 0, 23);
    CHECK_THROWS_AS(d.wait(soon()), dc::mismatch_error);
  }
  sync_all();

  // A receive nobody sends to: timeout_error after the deadline, naming peer, tag and bytes;
  // then a cancelled (destroyed) receive does not consume a later message.
  if (me == 0) {
    std::int64_t x = 0;
    auto r = b.irecv(&x, 8, 1, 99);
    const auto start = dc::clock::now();
    std::string what;
    try {
      r.wait(dc::deadline_after(std::chrono::seconds(1)));
    } catch (const dc::timeout_error& e) {
      what = e.what();
    }
    const double took = std::chrono::duration<double>(dc::clock::now() - start).count();
    CHECK(took >= 0.9);
    CHECK(took < 5.0);
    CHECK_MESSAGE(what.find("rank 1") != std::string::npos, what);
    CHECK_MESSAGE(what.find("tag 99") != std::string::npos, what);
    CHECK_MESSAGE(what.find("8 bytes") != std::string::npos, what);
    {
      std::int64_t lost = -5;
      auto pending = b.irecv(&lost, 8, 1, 98);
      CHECK_FALSE(pending.test());
    }  // destroyed while pending: cancelled
    sync_all();
    std::int64_t y = 0;
    auto r2 = b.irecv(&y, 8, 1, 98);
    r2.wait(soon());
    CHECK(y == 42);
  } else {
    sync_all();
    if (me == 1) {
      const std::int64_t v = 42;
      auto s = b.isend(&v, 8, 0, 98);
      s.wait(soon());
    }
  }
  sync_all();

  // Arguments that can never work.
  CHECK_THROWS_AS((void)b.isend(nullptr, 0, me, 1), dc::invalid_argument_error);
  CHECK_THROWS_AS((void)b.irecv(nullptr, 0, p, 1), dc::invalid_argument_error);
}

TEST_CASE("ucx ring") { all_cases<dc::strategy::ring>("ring"); }
TEST_CASE("ucx tree") { all_cases<dc::strategy::tree>("tree"); }
TEST_CASE("ucx parameter_server") { all_cases<dc::strategy::parameter_server>("ps"); }
TEST_CASE("ucx automatic") { all_cases<dc::strategy::automatic>("automatic"); }

TEST_CASE("ucx abort fails later waits") {
  const int me = the_job->world.rank;
  dc::ucx_backend b(*the_job);
  sync_all();
  if (me == 0) {
    std::int64_t x = 0;
    auto r = b.irecv(&x, 8, 1, 5);
    b.abort("test abort");
    try {
      r.wait(soon());
      FAIL("wait after abort returned");
    } catch (const dc::peer_lost_error& e) {
      CHECK(std::string(e.what()).find("test abort") != std::string::npos);
    }
    CHECK_THROWS_AS((void)b.isend(&x, 8, 1, 5), dc::peer_lost_error);
  } else {
    // The abort's notice reaches every peer: a wait on rank 0 fails at once, with the reason.
    std::int64_t x = 0;
    std::string what;
    try {
      auto r = b.irecv(&x, 8, 0, 5);
      r.wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("rank 0 aborted: test abort") != std::string::npos, what);
  }
  sync_all();  // nobody tears down (and force-closes) before rank 0 checked
}

int main(int argc, char** argv) {
  dc::job j = dc::bootstrap();
  the_job = &j;
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  the_job = nullptr;
  return rc;
}
