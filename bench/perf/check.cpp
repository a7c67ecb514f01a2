#include "check.hpp"

#include <array>
#include <cmath>
#include <type_traits>

#include "distcomm/core/half.hpp"

namespace distcomm::bench {

namespace {

// Every reduction input below depends on the element index only through i mod 4, 3 or 11, so
// the expected result repeats with lcm(4, 3, 11) and is computed once per residue.
constexpr std::size_t period = 132;

// Rank r's input at element i of a reduction. Small integers: sums of up to 64 ranks are exact
// even in bfloat16, products are powers of two, and min/max see negative values (except uint8).
std::int64_t reduce_input(reduce_op op, dtype t, int r, std::size_t i) {
  const auto rr = static_cast<std::size_t>(r);
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return static_cast<std::int64_t>(1 + (i + rr) % 4);
    case reduce_op::prod:
      return (i + rr) % 3 == 0 ? 2 : 1;
    case reduce_op::min:
    case reduce_op::max: {
      const auto v = static_cast<std::int64_t>((i * 7 + rr * 5) % 11) - 5;
      return t == dtype::u8 ? v + 5 : v;
    }
  }
  return 0;
}

// Rank r's input at element i of allgather and broadcast: different on every rank (below 97).
std::int64_t move_input(int r, std::size_t i) {
  return static_cast<std::int64_t>((i * 3 + static_cast<std::size_t>(r) * 17 + 1) % 97);
}

constexpr std::int64_t sentinel = 120;  // above every move_input; exact in every dtype

template <class T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

template <class T>
T from_int(std::int64_t v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);  // integers wrap, as DistComm's integer sum and prod do
  }
}

template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

// Relative tolerance of a floating-point result: one rounding per rank in the worst order.
template <class T>
double tolerance(int ranks) {
  double eps = 0;
  if constexpr (std::is_same_v<T, f16>) {
    eps = std::ldexp(1.0, -10);
  } else if constexpr (std::is_same_v<T, bf16>) {
    eps = std::ldexp(1.0, -7);
  } else if constexpr (std::is_same_v<T, float>) {
    eps = std::ldexp(1.0, -23);
  } else {
    eps = std::ldexp(1.0, -52);
  }
  return eps * ranks;
}

template <class T>
struct tag {
  using type = T;
};

template <class F>
decltype(auto) with_type(dtype t, F&& f) {
  switch (t) {
    case dtype::f16:
      return f(tag<f16>{});
    case dtype::bf16:
      return f(tag<bf16>{});
    case dtype::f32:
      return f(tag<float>{});
    case dtype::f64:
      return f(tag<double>{});
    case dtype::i8:
      return f(tag<std::int8_t>{});
    case dtype::u8:
      return f(tag<std::uint8_t>{});
    case dtype::i32:
      return f(tag<std::int32_t>{});
    case dtype::i64:
      break;
  }
  return f(tag<std::int64_t>{});
}

// The reduction of every rank's input at residue m, as T (integers: with wraparound, avg
// truncating) and as an exact double (floats).
template <class T>
struct expected_value {
  T as_type{};
  double exact = 0;
};

template <class T>
expected_value<T> reduce_expected(reduce_op op, dtype t, int ranks, std::size_t m) {
  if constexpr (is_float_v<T>) {
    double acc = static_cast<double>(reduce_input(op, t, 0, m));
    for (int q = 1; q < ranks; ++q) {
      const auto v = static_cast<double>(reduce_input(op, t, q, m));
      switch (op) {
        case reduce_op::sum:
        case reduce_op::avg:
          acc += v;
          break;
        case reduce_op::prod:
          acc *= v;
          break;
        case reduce_op::min:
          acc = std::fmin(acc, v);
          break;
        case reduce_op::max:
          acc = std::fmax(acc, v);
          break;
      }
    }
    if (op == reduce_op::avg) acc /= ranks;
    return {T{}, acc};
  } else {
    // Unsigned arithmetic wraps by definition; narrowing keeps the low bits, which is what a
    // wrapping sum or product in T gives in any order.
    auto acc = static_cast<std::uint64_t>(reduce_input(op, t, 0, m));
    for (int q = 1; q < ranks; ++q) {
      const std::int64_t v = reduce_input(op, t, q, m);
      const auto sacc = static_cast<std::int64_t>(acc);
      switch (op) {
        case reduce_op::sum:
        case reduce_op::avg:
          acc += static_cast<std::uint64_t>(v);
          break;
        case reduce_op::prod:
          acc *= static_cast<std::uint64_t>(v);
          break;
        case reduce_op::min:
          acc = static_cast<std::uint64_t>(v < sacc ? v : sacc);
          break;
        case reduce_op::max:
          acc = static_cast<std::uint64_t>(v > sacc ? v : sacc);
          break;
      }
    }
    T r = static_cast<T>(acc);
    if (op == reduce_op::avg) r = static_cast<T>(static_cast<std::int64_t>(r) / ranks);
    return {r, 0.0};
  }
}

}  // namespace

data_check::data_check(collective c, dtype t, reduce_op op, int ranks, int rank, int root,
                       std::size_t block, std::size_t from)
    : coll_(c),
      type_(t),
      op_(op),
      ranks_(ranks),
      rank_(rank),
      root_(root),
      block_(block),
      from_(from != static_cast<std::size_t>(-1) ? from : static_cast<std::size_t>(rank) * block) {}

std::vector<std::size_t> skewed_counts(std::size_t mean, int ranks) {
  std::vector<std::size_t> c(static_cast<std::size_t>(ranks));
  const auto p1 = static_cast<std::size_t>(ranks) + 1;
  for (std::size_t q = 0; q < c.size(); ++q) c[q] = mean * 2 * (q + 1) / p1;
  return c;
}

void data_check::fill_input(void* buf, std::size_t first, std::size_t count) const {
  with_type(type_, [&](auto tg) {
    using T = typename decltype(tg)::type;
    T* out = static_cast<T*>(buf);
    const bool reduction = coll_ == collective::allreduce || coll_ == collective::reduce_scatter;
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = first + k;
      out[k] = from_int<T>(reduction ? reduce_input(op_, type_, rank_, i) : move_input(rank_, i));
    }
  });
}

void data_check::fill_sentinel(void* buf, std::size_t count) const {
  with_type(type_, [&](auto tg) {
    using T = typename decltype(tg)::type;
    T* out = static_cast<T*>(buf);
    const T s = from_int<T>(sentinel);
    for (std::size_t k = 0; k < count; ++k) out[k] = s;
  });
}

std::int64_t data_check::wrong(const void* buf, std::size_t first, std::size_t count) const {
  return with_type(type_, [&](auto tg) -> std::int64_t {
    using T = typename decltype(tg)::type;
    const T* got = static_cast<const T*>(buf);
    std::int64_t bad = 0;
    if (coll_ == collective::allreduce || coll_ == collective::reduce_scatter) {
      std::array<expected_value<T>, period> table;
      for (std::size_t m = 0; m < period; ++m) {
        table[m] = reduce_expected<T>(op_, type_, ranks_, m);
      }
      const double tol = tolerance<T>(ranks_);
      for (std::size_t k = 0; k < count; ++k) {
        const expected_value<T>& e = table[(first + k) % period];
        if constexpr (is_float_v<T>) {
          const double g = to_double(got[k]);
          if (!(std::fabs(g - e.exact) <= tol * std::fabs(e.exact))) ++bad;
        } else {
          if (got[k] != e.as_type) ++bad;
        }
      }
      return bad;
    }
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t i = first + k;
      // alltoall(v): block q of the result is rank q's input from `from_` on.
      const bool exchange = coll_ == collective::alltoall || coll_ == collective::alltoallv;
      const std::int64_t e =
          coll_ == collective::allgather ? move_input(static_cast<int>(i / block_), i % block_)
          : exchange ? move_input(static_cast<int>(i / block_), from_ + i % block_)
                     : move_input(root_, i);
      if (!(to_double(got[k]) == static_cast<double>(e))) ++bad;
    }
    return bad;
  });
}

}  // namespace distcomm::bench
