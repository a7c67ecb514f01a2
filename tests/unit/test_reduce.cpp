// combine() and divide() for every dtype x op x aliasing case x count x alignment, against a
// scalar reference: floats computed in double and rounded once to the element type (double
// rounding through binary64 is innocuous for one +, *, / of 24-bit or narrower operands, since
// 53 >= 2 * 24 + 2), integers with explicitly wrapping unsigned 64-bit arithmetic.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"

namespace {

using distcomm::bf16;
using distcomm::dtype;
using distcomm::f16;
using distcomm::reduce_op;

constexpr std::size_t counts[] = {0, 1, 3, 17, 1000, 4099};

template <class T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---- exact decoding and independent rounding of the 16-bit formats ----------------------------

double half_value(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exp == 0x1f) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

double bfloat_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round |x| to the grid of a format with mant_bits stored mantissa bits and minimum normal
// exponent min_exp, ties to even; the division by a power of two is exact.
double round_to_format(double a, int mant_bits, int min_exp) {
  if (a == 0) return 0;
  const int e = std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  return std::nearbyint(a / quantum) * quantum;
}

std::uint16_t round_half(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  if (std::isnan(x)) return sign | 0x7e00u;
  if (std::isinf(x)) return sign | 0x7c00u;
  const double v = round_to_format(std::fabs(x), 10, -14);
  if (v >= 65536.0) return sign | 0x7c00u;
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<std::uint16_t>(std::ldexp(v, 24));
  const int e = std::ilogb(v);
  const auto mant = static_cast<std::uint16_t>(std::ldexp(v, 10 - e) - 1024);
  return sign | static_cast<std::uint16_t>(((e + 15) << 10) | mant);
}

std::uint16_t round_bfloat(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  if (std::isnan(x)) return sign | 0x7fc0u;
  if (std::isinf(x)) return sign | 0x7f80u;
  const double v = round_to_format(std::fabs(x), 7, -126);
  if (v >= std::ldexp(1.0, 128)) return sign | 0x7f80u;
  const auto f = static_cast<float>(v);  // exact: v has at most 8 significant bits
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return sign | static_cast<std::uint16_t>(u >> 16);
}

// ---- per-type helpers ---------------------------------------------------------------------------

template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, f16>) {
    return half_value(v.bits);
  } else if constexpr (std::is_same_v<T, bf16>) {
    return bfloat_value(v.bits);
  } else {
    return static_cast<double>(v);
  }
}

// Correctly rounded (nearest even) conversion of a double to a floating element type.
template <class T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, f16>) {
    return f16::from_bits(round_half(x));
  } else if constexpr (std::is_same_v<T, bf16>) {
    return bf16::from_bits(round_bfloat(x));
  } else {
    return static_cast<T>(x);
  }
}

template <class T>
bool is_nan(T v) {
  if constexpr (is_float_v<T>) {
    return std::isnan(to_double(v));
  } else {
    return false;
  }
}

// Same bits, or both NaN (16-bit results carry no NaN payload).
template <class T>
bool same(T x, T y) {
  if (is_nan(x) || is_nan(y)) return is_nan(x) && is_nan(y);
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

template <class T>
std::string show(T v) {
  if constexpr (is_float_v<T>) {
    return std::to_string(to_double(v));
  } else {
    return std::to_string(static_cast<long long>(v));
  }
}

template <class T>
T special_value(std::size_t k) {
  const double inf = std::numeric_limits<double>::infinity();
  if constexpr (is_float_v<T>) {
    const double values[] = {0.0, -0.0, 1.0, -2.5, inf, -inf, std::nan(""), 3.0};
    return from_double<T>(values[k % 8]);
  } else {
    const T values[] = {0,
                        1,
                        static_cast<T>(-1),
                        std::numeric_limits<T>::max(),
                        std::numeric_limits<T>::min(),
                        static_cast<T>(std::numeric_limits<T>::max() / 2 + 3),
                        2,
                        static_cast<T>(100)};
    return values[k % 8];
  }
}

// Mostly ordinary values (small mantissas, exponents within +-12, so sums and products round),
// some arbitrary bit patterns, and at every 7th index all ordered pairs of special values
// (+-0, +-inf, NaN, ...) so operand order in min/max and the +-0 cases are exercised.
template <class T>
void fill_inputs(T* a, T* b, std::size_t n, std::uint64_t seed) {
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 7 == 0) {
      a[i] = special_value<T>(i / 7);
      b[i] = special_value<T>(i / 56);
      continue;
    }
    for (T* out : {a + i, b + i}) {
      const std::uint64_t r = splitmix(state);
      if (!is_float_v<T> || r % 8 == 0) {
        // Any bit pattern (for integers: any value).
        std::memcpy(static_cast<void*>(out), &r, sizeof(T));
      } else {
        const double mant = static_cast<double>((r >> 8) & 0xffff) + 1;
        const int exp = static_cast<int>((r >> 24) % 25) - 12 - 16;
        const double v = std::ldexp((r & 16) ? -mant : mant, exp);
        *out = from_double<T>(v);
      }
    }
  }
}

template <class T>
T reference_combine(T a, T b, reduce_op op) {
  if constexpr (is_float_v<T>) {
    const double x = to_double(a);
    const double y = to_double(b);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:
        return from_double<T>(x + y);
      case reduce_op::prod:
        return from_double<T>(x * y);
      case reduce_op::min:  // NaN in either operand wins; otherwise b on ties (+0 vs -0)
        return std::isnan(x) ? a : std::isnan(y) ? b : x < y ? a : b;
      case reduce_op::max:
        return std::isnan(x) ? a : std::isnan(y) ? b : x > y ? a : b;
    }
  } else {
    const auto x = static_cast<std::uint64_t>(a);  // sign-extends, modulo 2^64
    const auto y = static_cast<std::uint64_t>(b);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:
        return static_cast<T>(x + y);
      case reduce_op::prod:
        return static_cast<T>(x * y);
      case reduce_op::min:
        return std::min(a, b);
      case reduce_op::max:
        return std::max(a, b);
    }
  }
  return T{};
}

template <class T>
T reference_divide(T x, std::size_t divisor) {
  if constexpr (is_float_v<T>) {
    return from_double<T>(to_double(x) / static_cast<double>(divisor));
  } else {
    // Truncation toward zero on magnitudes, so no divisor can overflow.
    const bool negative = x < 0;
    const std::uint64_t mag =
        negative ? 0 - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
    const std::uint64_t q = mag / divisor;
    return static_cast<T>(negative ? 0 - q : q);
  }
}

// A buffer of n elements starting `offset` elements into its storage, with a guard element on
// each side that no kernel may touch.
template <class T>
struct buffer {
  std::vector<T> storage;
  T* p;
  buffer(std::size_t n, std::size_t offset) : storage(n + 2), p(storage.data() + offset) {
    const std::uint8_t guard = 0xa5;
    std::memset(static_cast<void*>(storage.data()), guard, storage.size() * sizeof(T));
  }
  bool guards_intact(std::size_t n) const {
    const T* first = storage.data();
    const T* after = p + n;
    std::vector<std::uint8_t> expected(sizeof(T), 0xa5);
    const bool before_ok = p == first || std::memcmp(first, expected.data(), sizeof(T)) == 0;
    return before_ok && std::memcmp(after, expected.data(), sizeof(T)) == 0;
  }
};

enum class aliasing { distinct, dst_is_a, dst_is_b, a_is_b, all_same };
constexpr aliasing all_aliasings[] = {aliasing::distinct, aliasing::dst_is_a, aliasing::dst_is_b,
                                      aliasing::a_is_b, aliasing::all_same};
const char* to_string(aliasing k) {
  const char* names[] = {"distinct", "dst==a", "dst==b", "a==b", "dst==a==b"};
  return names[static_cast<int>(k)];
}

// Element offsets of dst, a, b: all aligned, all shifted, and mixed relative alignments.
constexpr std::size_t offset_sets[][3] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 1}, {0, 1, 0}};

}  // namespace

#define REDUCE_TYPES f16, bf16, float, double, std::int8_t, std::uint8_t, std::int32_t, std::int64_t

TEST_CASE_TEMPLATE("combine matches the scalar reference", T, REDUCE_TYPES) {
  const dtype t = distcomm::dtype_of<T>;
  std::uint64_t seed = 1;
  for (reduce_op op : distcomm::all_reduce_ops) {
    for (aliasing alias : all_aliasings) {
      for (std::size_t n : counts) {
        for (const auto& off : offset_sets) {
          CAPTURE(distcomm::to_string(t));
          CAPTURE(distcomm::to_string(op));
          CAPTURE(to_string(alias));
          CAPTURE(n);
          CAPTURE(off[0]);
          CAPTURE(off[1]);
          CAPTURE(off[2]);
          // Aliased operands share one buffer (and therefore one offset).
          buffer<T> a_buf(n, off[1]);
          buffer<T> b_buf(n, off[2]);
          buffer<T> d_buf(n, off[0]);
          fill_inputs(a_buf.p, b_buf.p, n, seed++);
          if (alias == aliasing::a_is_b || alias == aliasing::all_same) {
            std::copy(a_buf.p, a_buf.p + n, b_buf.p);
          }
          std::vector<T> expected(n);
          for (std::size_t i = 0; i < n; ++i) {
            expected[i] = reference_combine(a_buf.p[i], b_buf.p[i], op);
          }
          T* a = a_buf.p;
          T* b = b_buf.p;
          T* dst = d_buf.p;
          switch (alias) {
            case aliasing::distinct:
              break;
            case aliasing::dst_is_a:
              dst = a;
              break;
            case aliasing::dst_is_b:
              dst = b;
              break;
            case aliasing::a_is_b:
              b = a;
              break;
            case aliasing::all_same:
              dst = b = a;
              break;
          }
          distcomm::combine(dst, a, b, n, t, op);
          int failures = 0;
          for (std::size_t i = 0; i < n && failures < 5; ++i) {
            if (!same(dst[i], expected[i])) {
              ++failures;
              FAIL_CHECK("element ", i, ": got ", show(dst[i]), ", expected ", show(expected[i]));
            }
          }
          CHECK(a_buf.guards_intact(n));
          CHECK(b_buf.guards_intact(n));
          CHECK(d_buf.guards_intact(n));
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("divide matches the scalar reference", T, REDUCE_TYPES) {
  const dtype t = distcomm::dtype_of<T>;
  std::vector<std::size_t> divisors = {
      1, 2, 3, 7, 127, 128, 255, 256, std::size_t{1} << 31, std::size_t{1} << 63};
  if constexpr (!is_float_v<T>) {
    divisors.push_back(std::numeric_limits<std::size_t>::max());  // not a float: ints only
  }
  std::uint64_t seed = 1000;
  for (std::size_t divisor : divisors) {
    for (std::size_t n : counts) {
      for (bool in_place : {false, true}) {
        for (std::size_t off : {0, 1}) {
          CAPTURE(distcomm::to_string(t));
          CAPTURE(divisor);
          CAPTURE(n);
          CAPTURE(in_place);
          CAPTURE(off);
          buffer<T> src(n, off);
          buffer<T> scratch(n, 1 - off);
          fill_inputs(src.p, scratch.p, n, seed++);
          std::vector<T> expected(n);
          for (std::size_t i = 0; i < n; ++i) expected[i] = reference_divide(src.p[i], divisor);
          T* dst = in_place ? src.p : scratch.p;
          distcomm::divide(dst, src.p, n, t, divisor);
          int failures = 0;
          for (std::size_t i = 0; i < n && failures < 5; ++i) {
            if (!same(dst[i], expected[i])) {
              ++failures;
              FAIL_CHECK("element ", i, ": got ", show(dst[i]), ", expected ", show(expected[i]));
            }
          }
          CHECK(src.guards_intact(n));
          CHECK(scratch.guards_intact(n));
        }
      }
    }
  }
}

TEST_CASE("integer sum and prod wrap around") {
  auto one = [](auto a, auto b, reduce_op op) {
    decltype(a) out{};
    distcomm::combine(&out, &a, &b, 1, distcomm::dtype_of<decltype(a)>, op);
    return out;
  };
  CHECK(one(std::int8_t{100}, std::int8_t{100}, reduce_op::sum) == -56);
  CHECK(one(std::int8_t{-128}, std::int8_t{-1}, reduce_op::prod) == -128);
  CHECK(one(std::int8_t{16}, std::int8_t{16}, reduce_op::prod) == 0);
  CHECK(one(std::uint8_t{200}, std::uint8_t{100}, reduce_op::avg) == 44);
  CHECK(one(std::int32_t{2147483647}, std::int32_t{1}, reduce_op::sum) == -2147483647 - 1);
  CHECK(one(std::int32_t{65536}, std::int32_t{65536}, reduce_op::prod) == 0);
  CHECK(one(std::int64_t{1} << 62, std::int64_t{4}, reduce_op::prod) == 0);
  CHECK(one(std::numeric_limits<std::int64_t>::min(), std::int64_t{-1}, reduce_op::sum) ==
        std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("float min/max propagate NaN and keep operand order for signed zeros") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto one = [](float a, float b, reduce_op op) {
    float out = 0;
    distcomm::combine(&out, &a, &b, 1, dtype::f32, op);
    return out;
  };
  CHECK(std::isnan(one(nan, 1.0f, reduce_op::min)));
  CHECK(std::isnan(one(1.0f, nan, reduce_op::min)));
  CHECK(std::isnan(one(nan, 1.0f, reduce_op::max)));
  CHECK(std::isnan(one(1.0f, nan, reduce_op::max)));
  CHECK(std::signbit(one(0.0f, -0.0f, reduce_op::min)));  // equal: b
  CHECK_FALSE(std::signbit(one(-0.0f, 0.0f, reduce_op::min)));
  CHECK(one(-1.0f, 2.0f, reduce_op::min) == -1.0f);
  CHECK(one(-1.0f, 2.0f, reduce_op::max) == 2.0f);
}

TEST_CASE("16-bit floats round once, to nearest even") {
  // 2048 + 1 is a tie in f16 (spacing 2 above 2048): even is 2048. 2050 + 1 rounds up to 2052.
  f16 a[2] = {f16(2048.0f), f16(2050.0f)};
  f16 b[2] = {f16(1.0f), f16(1.0f)};
  f16 out[2];
  distcomm::combine(out, a, b, 2, dtype::f16, reduce_op::sum);
  CHECK(static_cast<float>(out[0]) == 2048.0f);
  CHECK(static_cast<float>(out[1]) == 2052.0f);
  f16 big = f16(60000.0f);
  distcomm::combine(out, &big, &big, 1, dtype::f16, reduce_op::sum);
  CHECK(std::isinf(static_cast<float>(out[0])));  // overflow goes to Inf
  bf16 x = bf16(1.0f);
  bf16 y = bf16::from_bits(0x3b80u);  // 2^-8: exactly half an ulp of 1.0 in bf16
  bf16 r;
  distcomm::combine(&r, &x, &y, 1, dtype::bf16, reduce_op::sum);
  CHECK(r.bits == 0x3f80u);
}

TEST_CASE("invalid arguments throw invalid_argument_error naming the value") {
  float a[4] = {1, 2, 3, 4};
  float b[4] = {1, 2, 3, 4};
  const auto bad_dtype = static_cast<dtype>(99);
  const auto bad_op = static_cast<reduce_op>(42);
  CHECK_THROWS_WITH_AS(distcomm::combine(a, a, b, 4, bad_dtype, reduce_op::sum),
                       doctest::Contains("99"), distcomm::invalid_argument_error);
  CHECK_THROWS_WITH_AS(distcomm::combine(a, a, b, 4, dtype::f32, bad_op), doctest::Contains("42"),
                       distcomm::invalid_argument_error);
  CHECK_THROWS_WITH_AS(distcomm::divide(a, a, 4, bad_dtype, 2), doctest::Contains("99"),
                       distcomm::invalid_argument_error);
  CHECK_THROWS_AS(distcomm::divide(a, a, 4, dtype::f32, 0), distcomm::invalid_argument_error);
  CHECK_THROWS_AS(distcomm::divide(a, a, 4, dtype::i32, 0), distcomm::invalid_argument_error);
  // Arguments are checked even when there is nothing to do.
  CHECK_THROWS_AS(distcomm::combine(nullptr, nullptr, nullptr, 0, bad_dtype, reduce_op::sum),
                  distcomm::invalid_argument_error);
  CHECK_THROWS_AS(distcomm::combine(a, nullptr, b, 4, dtype::f32, reduce_op::sum),
                  distcomm::invalid_argument_error);
  CHECK_THROWS_AS(distcomm::divide(nullptr, a, 4, dtype::f32, 2), distcomm::invalid_argument_error);
  CHECK(a[0] == 1.0f);  // nothing was written by the failed calls
}

TEST_CASE("count 0 is a no-op that accepts null pointers") {
  for (dtype t : distcomm::all_dtypes) {
    for (reduce_op op : distcomm::all_reduce_ops) {
      CHECK_NOTHROW(distcomm::combine(nullptr, nullptr, nullptr, 0, t, op));
    }
    CHECK_NOTHROW(distcomm::divide(nullptr, nullptr, 0, t, 3));
  }
}
