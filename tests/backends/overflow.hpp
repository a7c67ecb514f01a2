// Integer overflow: i8 and u8 sums, averages and products that overflow wrap around on every
// strategy and on the backend's native collectives (docs/ARCHITECTURE.md, "Integer overflow"):
// allreduce in place, grouped, and reduce_scatter, against the wrapped value computed here.
#pragma once

#include <cstdint>
#include <vector>

#include "allreduce.hpp"

namespace backend_suite {

// Every byte value over the elements and ranks: sums of p of them overflow both types often.
inline std::uint8_t overflow_byte(int rank, std::size_t i) {
  return static_cast<std::uint8_t>((i * 37 + static_cast<std::size_t>(rank) * 101 + 3) % 256);
}

inline std::int64_t overflow_value(int rank, std::size_t i, dc::dtype t) {
  const std::uint8_t b = overflow_byte(rank, i);
  return t == dc::dtype::i8 ? static_cast<std::int8_t>(b) : b;
}

// The wrapped reduction: sum and prod modulo 256 (as two's complement for i8), avg the wrapped
// sum divided by p, truncated toward zero.
inline std::int64_t wrapped_expected(std::size_t i, dc::dtype t, dc::reduce_op op, int p) {
  std::uint64_t acc = op == dc::reduce_op::prod ? 1 : 0;
  for (int r = 0; r < p; ++r) {
    const auto x = static_cast<std::uint64_t>(overflow_value(r, i, t));
    acc = op == dc::reduce_op::prod ? acc * x : acc + x;
  }
  const auto low = static_cast<std::uint8_t>(acc & 0xff);
  const std::int64_t v = t == dc::dtype::i8 ? static_cast<std::int8_t>(low) : low;
  return op == dc::reduce_op::avg ? v / p : v;
}

inline std::vector<unsigned char> overflow_buffer(int rank, std::size_t first, std::size_t count) {
  std::vector<unsigned char> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = overflow_byte(rank, first + i);
  return v;
}

// Elements of `res` (block starting at `first`) that differ from the wrapped reduction.
inline std::size_t overflow_wrong(const std::vector<unsigned char>& res, std::size_t first,
                                  dc::dtype t, dc::reduce_op op, int p, std::string* what) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < res.size(); ++i) {
    const std::int64_t want = wrapped_expected(first + i, t, op, p);
    const std::int64_t got = t == dc::dtype::i8 ? static_cast<std::int8_t>(res[i]) : res[i];
    if (got != want && wrong++ == 0) {
      *what = "element " + std::to_string(first + i) + " is " + std::to_string(got) +
              ", expected " + std::to_string(want);
    }
  }
  return wrong;
}

template <class B, class S>
void overflow_allreduce(rank_context<B>& ctx, const char* label) {
  dc::communicator<B, S> comm(ctx.make(), suite_config<B>());
  const int p = ctx.size;
  const auto pp = static_cast<std::size_t>(p);
  constexpr std::size_t count = 1000;  // several 256-byte segments
  for (dc::dtype t : {dc::dtype::i8, dc::dtype::u8}) {
    for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg, dc::reduce_op::prod}) {
      CAPTURE(label);
      CAPTURE(dc::to_string(t));
      CAPTURE(dc::to_string(op));
      std::string first;
      auto v = overflow_buffer(ctx.rank, 0, count);
      comm.allreduce(dc::tensor_view{v.data(), count, t}, op);
      CHECK_MESSAGE(overflow_wrong(v, 0, t, op, p, &first) == 0, "allreduce: " << first);

      // Grouped: two tensors, so the fusion buffer packs them.
      auto a = overflow_buffer(ctx.rank, 0, 300);
      auto b = overflow_buffer(ctx.rank, 300, 700);
      std::vector<dc::tensor_view> ts = {dc::tensor_view{a.data(), a.size(), t},
                                         dc::tensor_view{b.data(), b.size(), t}};
      comm.allreduce(dc::span<const dc::tensor_view>(ts), op);
      CHECK_MESSAGE(overflow_wrong(a, 0, t, op, p, &first) == 0, "grouped: " << first);
      CHECK_MESSAGE(overflow_wrong(b, 300, t, op, p, &first) == 0, "grouped: " << first);

      if (op == dc::reduce_op::prod) continue;  // reduce_scatter: sum and avg are enough
      const std::size_t block = 333;
      auto in = overflow_buffer(ctx.rank, 0, block * pp);
      std::vector<unsigned char> out(block);
      comm.reduce_scatter(dc::tensor_view{in.data(), in.size(), t},
                          dc::tensor_view{out.data(), out.size(), t}, op);
      CHECK_MESSAGE(
          overflow_wrong(out, static_cast<std::size_t>(ctx.rank) * block, t, op, p, &first) == 0,
          "reduce_scatter: " << first);
    }
  }
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("i8 and u8 overflow wraps around: every strategy and native", E,
                          backend_suite_overflow) {
  using B = typename E::backend;
  namespace st = distcomm::strategy;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::overflow_allreduce<B, st::ring>(ctx, "ring");
    backend_suite::overflow_allreduce<B, st::tree>(ctx, "tree");
    backend_suite::overflow_allreduce<B, st::recursive_doubling>(ctx, "recursive_doubling");
    backend_suite::overflow_allreduce<B, st::parameter_server>(ctx, "parameter_server");
    backend_suite::overflow_allreduce<B, st::automatic>(ctx, "automatic");
    if constexpr (distcomm::has_native_allreduce_v<B>) {
      backend_suite::overflow_allreduce<B, st::native>(ctx, "native");
    }
  });
}
