// Elementwise reduction kernels (see reduce.hpp). Every (dtype, op) pair is one plain loop that GCC
// auto-vectorizes at -O3 for baseline x86-64 (SSE2); no intrinsics, so the file stays portable.
// Exceptions: i64 min/max/prod (SSE2 has no 64-bit compare or multiply; the AVX2/AVX-512 clones
// below vectorize them) and integer divide (no SIMD integer division at all). Check with
// -fopt-info-vec-optimized / -fdump-tree-vect-optimized-missed, with -DDISTCOMM_NO_ISA_CLONES.
//
// Aliasing: callers may pass identical or disjoint buffers. Each case gets its own loop whose
// pointers are __restrict where that is true, so the vectorizer needs no runtime overlap checks
// (and never falls back to the scalar loop because of them). `a` is always the left operand.
//
// NaN and signed zeros in min/max: min(a, b) = (a < b || a is NaN) ? a : b, max likewise with >.
// A NaN in either operand therefore gives NaN (a NaN in `a` wins when both are NaN), so a NaN
// produced by one rank is never hidden by another rank's value. When a and b compare equal (+0 and
// -0), b is returned.
#include "distcomm/core/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "distcomm/core/error.hpp"
#include "distcomm/core/half.hpp"

namespace distcomm {
namespace detail {
namespace {

// ---- operations -------------------------------------------------------------------------------

// Integer sum and product are computed in the unsigned type so that overflow wraps (two's
// complement) instead of being undefined behaviour. For 8-bit types the arithmetic promotes to int,
// where 255 * 255 cannot overflow either.
template <class T, bool = std::is_integral_v<T>>
struct arith {
  using type = T;
};
template <class T>
struct arith<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using arith_t = typename arith<T>::type;

struct op_sum {
  template <class T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(
        static_cast<arith_t<T>>(static_cast<arith_t<T>>(a) + static_cast<arith_t<T>>(b)));
  }
};

struct op_prod {
  template <class T>
  static T apply(T a, T b) noexcept {
    return static_cast<T>(
        static_cast<arith_t<T>>(static_cast<arith_t<T>>(a) * static_cast<arith_t<T>>(b)));
  }
};

struct op_min {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;  // a != a: a is NaN (see the file comment)
    } else {
      return a < b ? a : b;
    }
  }
};

struct op_max {
  template <class T>
  static T apply(T a, T b) noexcept {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

// ---- instruction sets ---------------------------------------------------------------------------
// GCC function multiversioning: every loop is also built for x86-64-v3 (AVX2) and v4 (AVX-512),
// and the best one the CPU supports is picked once at load time: the wider loops gain a little on
// memory-bound sums and most on f16, whose conversions are compute-bound (docs/PERFORMANCE.md,
// "Reduction kernels against a plain loop"). v4 also vectorizes i64 min/max/prod, which SSE2
// cannot. Elsewhere the portable baseline loop is all there is; DISTCOMM_NO_ISA_CLONES builds
// only that (a test uses it to check it here).
#if !defined(DISTCOMM_NO_ISA_CLONES) && defined(__GNUC__) && !defined(__clang__) && \
    __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__)
#define DISTCOMM_ISA_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DISTCOMM_ISA_CLONES
#endif

// ---- native-type loops, one per aliasing case ---------------------------------------------------
// noinline keeps each loop a separate function so the __restrict qualifiers of its parameters are
// what the vectorizer sees (restrict information is fragile once inlined into the dispatcher).

template <class T, class Op>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void loop_distinct(T* __restrict dst,
                                                                 const T* __restrict a,
                                                                 const T* __restrict b,
                                                                 std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}

template <class T, class Op>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void loop_dst_is_a(T* __restrict dst,
                                                                 const T* __restrict b,
                                                                 std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], b[i]);
}

template <class T, class Op>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void loop_dst_is_b(T* __restrict dst,
                                                                 const T* __restrict a,
                                                                 std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], dst[i]);
}

template <class T, class Op>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void loop_a_is_b(T* __restrict dst,
                                                               const T* __restrict a,
                                                               std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], a[i]);
}

template <class T, class Op>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void loop_all_same(T* dst, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], dst[i]);
}

template <class T, class Op>
void combine_native(void* dst_v, const void* a_v, const void* b_v, std::size_t n) noexcept {
  T* dst = static_cast<T*>(dst_v);
  const T* a = static_cast<const T*>(a_v);
  const T* b = static_cast<const T*>(b_v);
  if (dst == a) {
    if (dst == b) {
      loop_all_same<T, Op>(dst, n);
    } else {
      loop_dst_is_a<T, Op>(dst, b, n);
    }
  } else if (dst == b) {
    loop_dst_is_b<T, Op>(dst, a, n);
  } else if (a == b) {
    loop_a_is_b<T, Op>(dst, a, n);
  } else {
    loop_distinct<T, Op>(dst, a, b, n);
  }
}

// ---- 16-bit floats: through float, in blocks ---------------------------------------------------

struct f16_conv {
  static float to_float(std::uint16_t h) noexcept { return half_bits_to_float(h); }
  static std::uint16_t from_float(float f) noexcept { return float_to_half_bits(f); }
};

struct bf16_conv {
  static float to_float(std::uint16_t h) noexcept { return bfloat_bits_to_float(h); }
  static std::uint16_t from_float(float f) noexcept { return float_to_bfloat_bits(f); }
};

// Elements converted per step: two float blocks (2 KiB) stay in L1 while each conversion loop is
// long enough to run vectorized. Widening first and narrowing last keeps each element rounded once.
constexpr std::size_t half_block = 256;

// Both inputs are read into local blocks before dst is written, so identical buffers in any
// combination are handled by this one loop; the local arrays never alias the caller's buffers.
template <class Conv, class Op>
DISTCOMM_ISA_CLONES void combine_half(void* dst_v, const void* a_v, const void* b_v,
                                      std::size_t n) noexcept {
  std::uint16_t* dst = static_cast<std::uint16_t*>(dst_v);
  const std::uint16_t* a = static_cast<const std::uint16_t*>(a_v);
  const std::uint16_t* b = static_cast<const std::uint16_t*>(b_v);
  float fa[half_block];
  float fb[half_block];
  for (std::size_t start = 0; start < n; start += half_block) {
    const std::size_t m = std::min(half_block, n - start);
    for (std::size_t j = 0; j < m; ++j) fa[j] = Conv::to_float(a[start + j]);
    for (std::size_t j = 0; j < m; ++j) fb[j] = Conv::to_float(b[start + j]);
    for (std::size_t j = 0; j < m; ++j) dst[start + j] = Conv::from_float(Op::apply(fa[j], fb[j]));
  }
}

template <class Conv>
DISTCOMM_ISA_CLONES void divide_half(void* dst_v, const void* src_v, std::size_t n,
                                     float divisor) noexcept {
  std::uint16_t* dst = static_cast<std::uint16_t*>(dst_v);
  const std::uint16_t* src = static_cast<const std::uint16_t*>(src_v);
  float f[half_block];
  for (std::size_t start = 0; start < n; start += half_block) {
    const std::size_t m = std::min(half_block, n - start);
    for (std::size_t j = 0; j < m; ++j) f[j] = Conv::to_float(src[start + j]);
    for (std::size_t j = 0; j < m; ++j) dst[start + j] = Conv::from_float(f[j] / divisor);
  }
}

// ---- divide ------------------------------------------------------------------------------------

template <class T>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void divide_distinct(T* __restrict dst,
                                                                   const T* __restrict src,
                                                                   std::size_t n,
                                                                   T divisor) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] / divisor;
}

template <class T>
DISTCOMM_ISA_CLONES __attribute__((noinline)) void divide_in_place(T* dst, std::size_t n,
                                                                   T divisor) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = dst[i] / divisor;
}

// Floats divide rather than multiply by the reciprocal: the result is then correctly rounded, and
// the loop is memory bound anyway. (The divisor converts exactly for any realistic rank count.)
template <class T>
void divide_float(void* dst_v, const void* src_v, std::size_t n, std::size_t divisor) noexcept {
  T* dst = static_cast<T*>(dst_v);
  const T* src = static_cast<const T*>(src_v);
  const T d = static_cast<T>(divisor);
  if (dst == src) {
    divide_in_place(dst, n, d);
  } else {
    divide_distinct(dst, src, n, d);
  }
}

// Integer division truncates toward zero (C++ semantics). x86 has no SIMD integer division, so
// these loops are scalar; avg over integers is rare enough that this does not matter.
template <class T>
void divide_integer(void* dst_v, const void* src_v, std::size_t n, std::size_t divisor) noexcept {
  T* dst = static_cast<T*>(dst_v);
  const T* src = static_cast<const T*>(src_v);
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  if (divisor == 1) {
    if (dst != src) std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  if (divisor <= max) {
    // divisor >= 2, so the INT_MIN / -1 overflow cannot happen.
    const T d = static_cast<T>(divisor);
    if (dst == src) {
      divide_in_place(dst, n, d);
    } else {
      divide_distinct(dst, src, n, d);
    }
    return;
  }
  // The divisor does not fit in T: every quotient is 0, except min / |min| == -1 for signed T.
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_signed_v<T>) {
      dst[i] = (src[i] == std::numeric_limits<T>::min() && divisor == max + 1) ? T(-1) : T(0);
    } else {
      dst[i] = 0;
    }
  }
}

// ---- dispatch ----------------------------------------------------------------------------------

template <class Op>
void combine_op(void* dst, const void* a, const void* b, std::size_t n, dtype t) {
  switch (t) {
    case dtype::f16:
      return combine_half<f16_conv, Op>(dst, a, b, n);
    case dtype::bf16:
      return combine_half<bf16_conv, Op>(dst, a, b, n);
    case dtype::f32:
      return combine_native<float, Op>(dst, a, b, n);
    case dtype::f64:
      return combine_native<double, Op>(dst, a, b, n);
    case dtype::i8:
      return combine_native<std::int8_t, Op>(dst, a, b, n);
    case dtype::u8:
      return combine_native<std::uint8_t, Op>(dst, a, b, n);
    case dtype::i32:
      return combine_native<std::int32_t, Op>(dst, a, b, n);
    case dtype::i64:
      return combine_native<std::int64_t, Op>(dst, a, b, n);
  }
}

void check_dtype(const char* routine, dtype t) {
  if (!is_valid(t)) {
    throw invalid_argument_error(
        std::string(routine) + ": dtype value " + std::to_string(static_cast<unsigned>(t)) +
        " is not a distcomm::dtype (f16, bf16, f32, f64, i8, u8, i32, i64)");
  }
}

void check_pointers(const char* routine, const void* dst, const void* a, const void* b,
                    std::size_t count) {
  if (dst == nullptr || a == nullptr || b == nullptr) {
    throw invalid_argument_error(std::string(routine) + ": null buffer with count " +
                                 std::to_string(count) + " (only count 0 may pass null pointers)");
  }
}

}  // namespace
}  // namespace detail

void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op) {
  // Arguments are validated even when count is 0, so a bad call fails on its first use.
  detail::check_dtype("combine", t);
  if (!is_valid(op)) {
    throw invalid_argument_error("combine: reduce_op value " +
                                 std::to_string(static_cast<unsigned>(op)) +
                                 " is not a distcomm::reduce_op (sum, avg, min, max, prod)");
  }
  if (count == 0) return;
  detail::check_pointers("combine", dst, a, b, count);
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:  // avg combines as sum; divide() finishes it
      return detail::combine_op<detail::op_sum>(dst, a, b, count, t);
    case reduce_op::min:
      return detail::combine_op<detail::op_min>(dst, a, b, count, t);
    case reduce_op::max:
      return detail::combine_op<detail::op_max>(dst, a, b, count, t);
    case reduce_op::prod:
      return detail::combine_op<detail::op_prod>(dst, a, b, count, t);
  }
}

void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor) {
  detail::check_dtype("divide", t);
  if (divisor == 0) {
    throw invalid_argument_error(
        "divide: divisor is 0 (avg needs the number of contributing ranks, at least 1)");
  }
  if (count == 0) return;
  detail::check_pointers("divide", dst, src, src, count);
  switch (t) {
    case dtype::f16:
      return detail::divide_half<detail::f16_conv>(dst, src, count, static_cast<float>(divisor));
    case dtype::bf16:
      return detail::divide_half<detail::bf16_conv>(dst, src, count, static_cast<float>(divisor));
    case dtype::f32:
      return detail::divide_float<float>(dst, src, count, divisor);
    case dtype::f64:
      return detail::divide_float<double>(dst, src, count, divisor);
    case dtype::i8:
      return detail::divide_integer<std::int8_t>(dst, src, count, divisor);
    case dtype::u8:
      return detail::divide_integer<std::uint8_t>(dst, src, count, divisor);
    case dtype::i32:
      return detail::divide_integer<std::int32_t>(dst, src, count, divisor);
    case dtype::i64:
      return detail::divide_integer<std::int64_t>(dst, src, count, divisor);
  }
}

}  // namespace distcomm
