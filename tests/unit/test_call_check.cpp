// The call check's carried allreduce (check/carried.hpp): a small allreduce rides in the
// agreement's own messages at every world size that carries, with the rank-order fold's bits on
// every rank, the strategy's body not run; above the carried size, or in a larger world, the
// strategy runs as before.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/backends/local.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/strategy/ring.hpp"

namespace dc = distcomm;

namespace {

// strategy::ring, counting the allreduces its body runs.
std::atomic<int> bodies{0};
struct counting_ring : dc::strategy::ring {
  using ring::ring;
  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dc::dtype t, dc::reduce_op op,
                 dc::deadline until) {
    ++bodies;
    ring::allreduce(b, in, out, count, t, op, until);
  }
};

// Rank r's contribution: element i of a buffer of `bytes`, distinct per rank and element.
std::vector<unsigned char> contribution(int r, std::size_t bytes, dc::dtype t) {
  std::vector<unsigned char> v(bytes);
  const std::size_t n = bytes / dc::dtype_size(t);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = 1.0 + 0.37 * r + 0.011 * static_cast<double>(i);
    unsigned char* at = v.data() + i * dc::dtype_size(t);
    if (t == dc::dtype::f32) {
      const float f = static_cast<float>(x);
      std::memcpy(at, &f, sizeof f);
    } else if (t == dc::dtype::f64) {
      std::memcpy(at, &x, sizeof x);
    } else {
      const std::int32_t k = r * 1000 + static_cast<std::int32_t>(i) - 7;
      std::memcpy(at, &k, sizeof k);
    }
  }
  return v;
}

// The rank-order fold of every rank's contribution.
std::vector<unsigned char> folded(int p, std::size_t count, dc::dtype t, dc::reduce_op op) {
  const std::size_t bytes = count * dc::dtype_size(t);
  std::vector<unsigned char> acc = contribution(0, bytes, t);
  for (int q = 1; q < p; ++q) {
    const auto c = contribution(q, bytes, t);
    dc::combine(acc.data(), acc.data(), c.data(), count, t, op);
  }
  if (op == dc::reduce_op::avg) dc::divide(acc.data(), acc.data(), count, t, p);
  return acc;
}

dc::config checked_config() {
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  c.mismatch_check = true;
  return c;
}

}  // namespace

TEST_CASE("carried allreduce: the rank-order fold on every rank, at every world size") {
  const dc::dtype types[] = {dc::dtype::f32, dc::dtype::f64, dc::dtype::i32};
  const dc::reduce_op ops[] = {dc::reduce_op::sum, dc::reduce_op::avg, dc::reduce_op::max,
                               dc::reduce_op::prod};
  for (int p = 2; p <= dc::check::carried_ranks + 1; ++p) {
    CAPTURE(p);
    const bool carries = p <= dc::check::carried_ranks;
    dc::local_world world(p);
    std::atomic<int> wrong{0};
    bodies = 0;
    // The largest carried contribution at p (check::carried_limit), or 4 KiB where none is.
    const std::size_t limit =
        std::max<std::size_t>(dc::check::carried_limit<dc::local_backend>(p), 4096);
    int calls = 0;
    for (dc::dtype t : types) {
      for (dc::reduce_op op : ops) {
        if (op == dc::reduce_op::avg && t == dc::dtype::i32) continue;
        const std::size_t largest = limit / dc::dtype_size(t);
        for (std::size_t count : {std::size_t{1}, std::size_t{3}, largest}) calls += count != 0;
      }
    }
    world.run([&](dc::local_backend b) {
      dc::communicator<dc::local_backend, counting_ring> comm(std::move(b), checked_config());
      const int r = comm.rank();
      for (dc::dtype t : types) {
        for (dc::reduce_op op : ops) {
          if (op == dc::reduce_op::avg && t == dc::dtype::i32) continue;
          const std::size_t largest = limit / dc::dtype_size(t);
          for (std::size_t count : {std::size_t{1}, std::size_t{3}, largest}) {
            const std::size_t bytes = count * dc::dtype_size(t);
            const auto want = folded(p, count, t, op);
            auto in = contribution(r, bytes, t);
            std::vector<unsigned char> out(bytes, 0xee);
            comm.allreduce(dc::tensor_view{in.data(), count, t},
                           dc::tensor_view{out.data(), count, t}, op);
            comm.allreduce(dc::tensor_view{in.data(), count, t}, op);  // in place
            // The ring adds in another order: its floats are only close to the fold's.
            const bool exact = carries || t == dc::dtype::i32;
            if (exact && (out != want || in != want)) ++wrong;
          }
        }
      }
      // One element above the carried size: the strategy's body runs.
      std::vector<std::int32_t> big(limit / sizeof(std::int32_t) + 1, r + 1);
      comm.allreduce(dc::view(big));
      for (std::int32_t x : big) {
        if (x != p * (p + 1) / 2) ++wrong;
      }
    });
    CHECK(wrong == 0);
    // Every rank ran the ring for the large call; the small ones (two per case) only where the
    // world carries.
    CHECK(bodies == p * (1 + (carries ? 0 : 2 * calls)));
  }
}

TEST_CASE(
    "carried allgather, alltoall and broadcast: every world size, with and without carrying") {
  for (int p = 2; p <= dc::check::carried_ranks + 1; ++p) {
    CAPTURE(p);
    dc::local_world world(p);
    std::atomic<int> wrong{0};
    world.run([&](dc::local_backend b) {
      dc::communicator<dc::local_backend, dc::strategy::ring> comm(std::move(b), checked_config());
      const int r = comm.rank();
      const auto n = static_cast<std::size_t>(p);
      const std::size_t slot =
          std::max<std::size_t>(dc::check::carried_limit<dc::local_backend>(p), 4096);
      // Sizes that carry (a whole contribution within the slot) and one that does not.
      for (std::size_t count : {std::size_t{1}, slot / sizeof(std::int32_t) / n, slot}) {
        if (count == 0) continue;
        // allgather: block q from rank q.
        std::vector<std::int32_t> in(count), out(count * n, -1);
        for (std::size_t i = 0; i < count; ++i) in[i] = r * 100000 + static_cast<int>(i);
        comm.allgather(dc::view(in), dc::view(out));
        for (std::size_t q = 0; q < n; ++q) {
          for (std::size_t i = 0; i < count; ++i) {
            if (out[q * count + i] != static_cast<int>(q) * 100000 + static_cast<int>(i)) ++wrong;
          }
        }
        // alltoall: element i of rank q's block for r.
        std::vector<std::int32_t> send(count * n), recv(count * n, -1);
        for (std::size_t q = 0; q < n; ++q) {
          for (std::size_t i = 0; i < count; ++i) {
            send[q * count + i] = r * 1000000 + static_cast<int>(q) * 1000 + static_cast<int>(i);
          }
        }
        comm.alltoall(dc::view(send), dc::view(recv));
        for (std::size_t q = 0; q < n; ++q) {
          for (std::size_t i = 0; i < count; ++i) {
            if (recv[q * count + i] !=
                static_cast<int>(q) * 1000000 + r * 1000 + static_cast<int>(i)) {
              ++wrong;
            }
          }
        }
        // broadcast from the last rank.
        std::vector<std::int32_t> data(count, r);
        comm.broadcast(dc::view(data), p - 1);
        for (std::int32_t x : data) {
          if (x != p - 1) ++wrong;
        }
      }
    });
    CHECK(wrong == 0);
  }
}

// strategy::ring, remembering whether the call check compared alltoallv's counts.
std::atomic<int> counts_agreed{0};
struct recording_ring : dc::strategy::ring {
  using ring::ring;
  template <class B>
  void alltoallv(B& b, const void* in, const std::size_t* sc, const std::size_t* sd, void* out,
                 const std::size_t* rc, const std::size_t* rd, dc::dtype t, dc::deadline until,
                 bool agreed = false) {
    counts_agreed += agreed;
    ring::alltoallv(b, in, sc, sd, out, rc, rd, t, until, agreed);
  }
};

TEST_CASE("carried alltoallv counts: compared in the check's exchange, the same error everywhere") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    dc::local_world world(p);
    counts_agreed = 0;
    std::atomic<int> wrong{0};
    std::atomic<int> named{0};
    world.run([&](dc::local_backend b) {
      dc::communicator<dc::local_backend, recording_ring> comm(std::move(b), checked_config());
      const int r = comm.rank();
      const auto n = static_cast<std::size_t>(p);
      // Rank r sends q + 1 elements to rank q, each worth 10 r + q.
      std::vector<std::size_t> sc(n), rc(n, static_cast<std::size_t>(r) + 1);
      std::vector<std::int32_t> in, out(n * (static_cast<std::size_t>(r) + 1), -1);
      for (std::size_t q = 0; q < n; ++q) {
        sc[q] = q + 1;
        for (std::size_t i = 0; i <= q; ++i) in.push_back(10 * r + static_cast<int>(q));
      }
      comm.alltoallv(dc::view(in), sc, dc::view(out), rc);
      for (std::size_t q = 0; q < n; ++q) {
        for (std::size_t i = 0; i <= static_cast<std::size_t>(r); ++i) {
          if (out[q * (static_cast<std::size_t>(r) + 1) + i] != 10 * static_cast<int>(q) + r)
            ++wrong;
        }
      }
      // The last rank expects one element too many from rank 0: every rank names that pair.
      if (r == p - 1) rc[0] += 1;
      out.assign(n * (static_cast<std::size_t>(r) + 1) + 1, -1);
      try {
        comm.alltoallv(dc::view(in), sc, dc::view(out), rc);
      } catch (const dc::mismatch_error& e) {
        const std::string want = "rank 0 sends " + std::to_string(p) + " elements to rank " +
                                 std::to_string(p - 1) + ", whose recv_counts[0] is " +
                                 std::to_string(p + 1);
        if (std::string(e.what()).find(want) != std::string::npos) ++named;
      }
      comm.barrier();  // usable afterwards
    });
    CHECK(wrong == 0);
    CHECK(named == p);
    CHECK(counts_agreed == p);  // the first call's, on every rank; the second ran no body
  }
}

TEST_CASE("carried allreduce: off with the check, the strategy's body runs") {
  dc::local_world world(2);
  bodies = 0;
  world.run([&](dc::local_backend b) {
    dc::config c = checked_config();
    c.mismatch_check = false;
    dc::communicator<dc::local_backend, counting_ring> comm(std::move(b), c);
    float x = 1.0f;
    comm.allreduce(dc::view(&x, 1));
    CHECK(x == 2.0f);
  });
  CHECK(bodies == 2);
}

TEST_CASE("carried mismatch: found by the exchange that carries the data, on every strategy") {
  for (const dc::strategy_info& info : dc::strategies()) {
    CAPTURE(info.name);
    dc::local_world world(3);
    std::atomic<int> named{0};
    std::atomic<int> untouched{0};
    world.run([&](dc::local_backend b) {
      dc::any_communicator comm = dc::make_communicator(std::move(b), info.name, checked_config());
      const int r = comm.rank();
      // Rank 1 reduces 3 elements, the others 2: both carried, only the fingerprint tells.
      std::vector<float> v(r == 1 ? 3 : 2, 1.5f);
      try {
        comm.allreduce(dc::view(v));
      } catch (const dc::mismatch_error& e) {
        named += std::string(e.what()).find("element count") != std::string::npos;
      }
      untouched += v == std::vector<float>(r == 1 ? 3 : 2, 1.5f);
      std::vector<float> ok(2, static_cast<float>(r));
      comm.allreduce(dc::view(ok));  // usable afterwards
      if (ok[1] != 3.0f) named -= 100;
    });
    CHECK(named == 3);
    CHECK(untouched == 3);
  }
}

namespace {

// The local backend, recording the size of every message it sends on the call check's tag.
std::atomic<std::size_t> check_bytes_max{0};
std::atomic<int> check_messages{0};
class recording_local {
 public:
  using request = dc::local_request;
  static constexpr const char* name = "recording-local";
  explicit recording_local(dc::local_backend b) : b_(std::move(b)) {}
  int rank() const { return b_.rank(); }
  int size() const { return b_.size(); }
  [[nodiscard]] request isend(const void* d, std::size_t n, int peer, dc::tag_t tag) {
    if (tag == dc::check::tag_agree) {
      ++check_messages;
      std::size_t seen = check_bytes_max.load();
      while (n > seen && !check_bytes_max.compare_exchange_weak(seen, n)) {
      }
    }
    return b_.isend(d, n, peer, tag);
  }
  [[nodiscard]] request irecv(void* d, std::size_t n, int peer, dc::tag_t tag) {
    return b_.irecv(d, n, peer, tag);
  }
  [[nodiscard]] request irecv_up_to(void* d, std::size_t n, std::size_t* got, int peer,
                                    dc::tag_t tag) {
    return b_.irecv_up_to(d, n, got, peer, tag);
  }
  void abort(const std::string& reason) noexcept { b_.abort(reason); }

 private:
  dc::local_backend b_;
};

}  // namespace

TEST_CASE("sized messages: a brief of digests and what the call carries, no more") {
  static_assert(dc::check::sized_messages<recording_local>);
  dc::local_world world(2);
  check_messages = 0;
  std::atomic<int> wrong{0};
  const auto largest = [](std::size_t cap) { return check_bytes_max.exchange(0) <= cap; };
  world.run([&](dc::local_backend b) {
    dc::communicator<recording_local, dc::strategy::ring> comm(recording_local(std::move(b)),
                                                               checked_config());
    const int r = comm.rank();
    // An 8-byte allreduce: the brief (32 bytes) and one 8-byte slot, within one cache line.
    double x = r + 1.0;
    comm.allreduce(dc::view(&x, 1));
    if (x != 3.0) ++wrong;
    comm.barrier();
    if (r == 0 && !largest(sizeof(dc::check::brief) + 8)) ++wrong;
    comm.barrier();
    // A call above the carried limit: the brief alone, then the ring.
    std::vector<float> big(dc::check::carried_limit<recording_local>(2) / sizeof(float) + 4, 1.0f);
    comm.allreduce(dc::view(big));
    if (big.front() != 2.0f || big.back() != 2.0f) ++wrong;
    comm.barrier();
    if (r == 0 && !largest(sizeof(dc::check::brief))) ++wrong;
    comm.barrier();
    // Ranks that differ: the digests tell, the second exchange of full fingerprints names the
    // field on both ranks alike; the communicator stays usable.
    std::vector<float> v(r == 0 ? 5 : 6, 1.0f);
    try {
      comm.allreduce(dc::view(v));
      ++wrong;
    } catch (const dc::mismatch_error& e) {
      if (std::string(e.what()).find("element count") == std::string::npos) ++wrong;
    }
    comm.barrier();
    if (r == 0 && check_bytes_max.exchange(0) != sizeof(dc::check::agreement)) ++wrong;
    comm.barrier();
    float y = 1.0f;
    comm.allreduce(dc::view(&y, 1));
    if (y != 2.0f) ++wrong;
  });
  CHECK(wrong == 0);
  CHECK(check_messages > 0);
}

// After a mismatch each rank tells the others which messages it sent them early (tag and size,
// check/gate.hpp's drain_early) and drops theirs. A size in that message is the peer's word: one
// larger than memory fails the communicator with a peer_lost_error naming the peer and the size,
// never std::bad_alloc or std::length_error out of the drain.
TEST_CASE("the drain after a mismatch takes a peer's early sizes only where memory has them") {
  constexpr std::size_t words = 1 + 2 * dc::check::max_early_sends;
  for (const std::uint64_t forged : {std::uint64_t{1} << 47, ~std::uint64_t{0}}) {
    CAPTURE(forged);
    dc::local_world world(2);
    std::string what;
    world.run([&](dc::local_backend b) {
      const auto until = dc::clock::now() + std::chrono::seconds(60);
      if (b.rank() == 1) {  // a peer whose drain message says it sent `forged` bytes early
        std::vector<std::uint64_t> told(words, 0), heard(words, 0);
        told[0] = 1;
        told[1] = 1000;  // a tag
        told[2] = forged;
        auto in = b.irecv(heard.data(), words * sizeof(std::uint64_t), 0, dc::check::tag_drain);
        b.isend(told.data(), words * sizeof(std::uint64_t), 0, dc::check::tag_drain).wait(until);
        in.wait(until);
        return;
      }
      try {
        dc::check::drain_early(b, {}, until);
      } catch (const dc::peer_lost_error& e) {
        what = e.what();
      }
    });
    CHECK(what.find("rank 1 says it sent rank 0 " + std::to_string(forged) + " bytes early") !=
          std::string::npos);
  }
}
