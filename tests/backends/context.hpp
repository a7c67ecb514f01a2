// What the shared backend suite (suite.hpp) runs on: one rank's view of a world, the suite's
// configuration, a control communicator for barriers and cross-rank comparisons, and the
// integer inputs whose reductions are exact in every dtype.
//
// Each backend's main supplies an environment E:
//   using backend = ...;                           // the backend under test
//   static constexpr bool cancel_retracts = ...;   // see p2p.hpp, "destroying a pending receive"
//   static constexpr bool sets_messages_aside = false;  // optional (true without it): a message
//                                  // waits at its sender until a receive is posted (p2p.hpp)
//   static void run(const std::function<void(rank_context<backend>&)>& body);
// run() calls body once per rank of the world: in this process when ranks are processes
// (mpirun, distcomm-run), on one thread per rank for the local backend.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "distcomm/communicator.hpp"
#include "distcomm/core/half.hpp"
#include "distcomm/strategy/ring.hpp"

namespace backend_suite {

namespace dc = distcomm;

template <class B>
struct rank_context {
  int rank = 0;
  int size = 1;
  // A new backend over the same ranks. Collective: every rank makes its backends in the same
  // order, and the n-th backend of one rank talks to the n-th backend of the others.
  std::function<B()> make;
};

// Deadline for a single point-to-point wait in the tests: far beyond any healthy wait, short
// enough that a hang fails the test well inside ctest's limit.
inline dc::deadline soon() { return dc::deadline_after(std::chrono::seconds(30)); }

// The configuration every communicator of the suite starts from. Small segments, so the test
// buffers (at most a few KiB) cross segment boundaries; an automatic table that sends each test
// size range to a different algorithm.
template <class B>
dc::config suite_config() {
  dc::config c = dc::config::from_env();  // DISTCOMM_LOG and a shorter DISTCOMM_TIMEOUT apply
  c.timeout = std::min(c.timeout, std::chrono::duration<double>(30.0));
  c.segment_bytes = 256;
  c.fusion_threshold = dc::config{}.fusion_threshold;
  c.ps_servers = 1;
  c.deterministic = false;
  c.algo = dc::algo_table::parse(dc::has_native_allreduce_v<B>
                                     ? "tree:0-64;ps:64-1K;ring:1K-2K;native:2K-max"
                                     : "tree:0-64;ps:64-1K;ring:1K-max",
                                 "backend suite");
  return c;
}

// A ring communicator on its own backend, beside the one under test: barriers between the steps
// of a test, and bitwise comparisons across ranks through the backend itself (no store needed,
// so it works under mpirun as well).
template <class B>
class control {
 public:
  explicit control(rank_context<B>& ctx) : comm_(ctx.make(), suite_config<B>()) {}

  void barrier() { comm_.barrier(); }

  // True when every rank passed the same value.
  bool same_on_every_rank(std::uint64_t v) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(comm_.size()));
    comm_.allgather(dc::tensor_view{&v, sizeof v, dc::dtype::u8},
                    dc::tensor_view{all.data(), all.size() * sizeof v, dc::dtype::u8});
    return std::all_of(all.begin(), all.end(), [&](std::uint64_t x) { return x == all[0]; });
  }

  dc::communicator<B, dc::strategy::ring>& comm() { return comm_; }

 private:
  dc::communicator<B, dc::strategy::ring> comm_;
};

// ---- typed access to raw buffers ------------------------------------------------------------

inline double get(const void* p, std::size_t i, dc::dtype t) {
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

inline void put(void* p, std::size_t i, dc::dtype t, double v) {
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
      static_cast<double*>(p)[i] = v;
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
      static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

// ---- exact inputs ---------------------------------------------------------------------------

// Element i of `rank`'s input: integers small enough that every partial result of every op is
// exact in every dtype (bf16 holds integers up to 256, i8 up to 127) for up to 6 ranks: sums of
// [-20, 20] (u8: [0, 39]), products of {-1, 1, 2} (u8: {1, 2}), averages of multiples of p.
inline std::int64_t exact_input(int rank, std::size_t i, dc::dtype t, dc::reduce_op op, int p) {
  const auto h =
      static_cast<std::int64_t>((i * 2654435761u + static_cast<std::size_t>(rank) * 40503u) % 97);
  const bool is_unsigned = t == dc::dtype::u8;
  switch (op) {
    case dc::reduce_op::prod:
      return is_unsigned ? 1 + h % 2 : (h % 3 == 0 ? -1 : h % 3);
    case dc::reduce_op::avg:
      return p * (is_unsigned ? h % 6 : h % 7 - 3);
    default:
      return is_unsigned ? h % 40 : h % 41 - 20;
  }
}

inline std::int64_t exact_expected(std::size_t i, dc::dtype t, dc::reduce_op op, int p) {
  std::int64_t acc = exact_input(0, i, t, op, p);
  for (int r = 1; r < p; ++r) {
    const std::int64_t x = exact_input(r, i, t, op, p);
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

// `count` elements of exact_input, starting at element `first`, plus one guard byte.
inline std::vector<unsigned char> exact_buffer(int rank, std::size_t first, std::size_t count,
                                               dc::dtype t, dc::reduce_op op, int p,
                                               unsigned char guard = 0x5a) {
  std::vector<unsigned char> v(count * dc::dtype_size(t) + 1, guard);
  for (std::size_t i = 0; i < count; ++i) {
    put(v.data(), i, t, static_cast<double>(exact_input(rank, first + i, t, op, p)));
  }
  return v;
}

// Number of elements of `res` that differ from exact_expected(first + i); the first is described.
inline std::size_t count_wrong(const void* res, std::size_t first, std::size_t count, dc::dtype t,
                               dc::reduce_op op, int p, std::string* what) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto want = static_cast<double>(exact_expected(first + i, t, op, p));
    const double got = get(res, i, t);
    if (got != want && wrong++ == 0) {
      *what = "element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
              std::to_string(want);
    }
  }
  return wrong;
}

// ---- non-integer inputs ---------------------------------------------------------------------

// A value of magnitude [0.25, 4) with a random sign and a full mantissa, exactly representable in
// t: sums round, so the order in which ranks are added shows in the last bits.
inline double random_input(int rank, std::size_t i, dc::dtype t) {
  std::uint64_t z = static_cast<std::uint64_t>(rank + 1) * 0x9e3779b97f4a7c15u +
                    i * 0xbf58476d1ce4e5b9u + static_cast<std::uint64_t>(t);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 12) / 4503599627370496.0;  // [0, 1)
  const double v = 0.25 * std::exp2(4.0 * u);
  unsigned char tmp[8];
  put(tmp, 0, t, (z & 1) != 0 ? -v : v);
  return get(tmp, 0, t);
}

// FNV-1a, to compare results across ranks as one 64-bit value.
inline std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
constexpr std::uint64_t fnv_basis = 0xcbf29ce484222325ull;

}  // namespace backend_suite
