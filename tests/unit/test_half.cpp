// f16 / bf16 conversions (half.hpp) against independent references, and the dtype helpers.
// f16 -> float is checked exhaustively; float -> 16-bit on a strided sweep of all float bit
// patterns plus every rounding boundary (each value halfway between adjacent 16-bit values and
// its float neighbours), subnormals, and the overflow edge.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/half.hpp"

namespace {

using distcomm::detail::bfloat_bits_to_float;
using distcomm::detail::bits_float;
using distcomm::detail::float_bits;
using distcomm::detail::float_to_bfloat_bits;
using distcomm::detail::float_to_half_bits;
using distcomm::detail::half_bits_to_float;

// Stride through the 2^32 float bit patterns: prime, so every exponent/mantissa bit mix shows up;
// ~4.2 million values keeps each sweep well under a second even under ASan/UBSan.
constexpr std::uint64_t float_stride = 1021;

bool is_half_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool is_bfloat_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// Exact value of a binary16 bit pattern, from the definition of the format.
double half_value(std::uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exp == 0x1f) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// Round |x| to a multiple of 2^(max(ilogb(x), min_exp) - mant_bits), ties to even (nearbyint
// in the default rounding mode). The quotient is exact in double for float inputs.
double round_to_format(double a, int mant_bits, int min_exp) {
  if (a == 0) return 0;
  const int e = std::max(std::ilogb(a), min_exp);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  return std::nearbyint(a / quantum) * quantum;
}

// Slow, obviously-correct float -> binary16 (round to nearest even, overflow to Inf).
std::uint16_t reference_half(float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  if (std::isnan(x)) return sign | 0x7e00u;
  if (std::isinf(x)) return sign | 0x7c00u;
  const double v = round_to_format(std::fabs(static_cast<double>(x)), 10, -14);
  if (v >= 65536.0) return sign | 0x7c00u;  // includes Inf and everything from 65520 up
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<std::uint16_t>(std::ldexp(v, 24));
  const int e = std::ilogb(v);
  const auto mant = static_cast<std::uint16_t>(std::ldexp(v, 10 - e) - 1024);
  return sign | static_cast<std::uint16_t>(((e + 15) << 10) | mant);
}

// Slow float -> bfloat16: 8 significant bits, float's exponent range (subnormals included).
std::uint16_t reference_bfloat(float x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0;
  if (std::isnan(x)) return sign | 0x7fc0u;
  if (std::isinf(x)) return sign | 0x7f80u;
  const double v = round_to_format(std::fabs(static_cast<double>(x)), 7, -126);
  if (v >= std::ldexp(1.0, 128)) return sign | 0x7f80u;
  const std::uint32_t u = float_bits(static_cast<float>(v));  // exact: v has <= 8 bits
  if ((u & 0xffffu) != 0) FAIL("reference_bfloat: ", v, " is not a bf16 value");
  return sign | static_cast<std::uint16_t>(u >> 16);
}

#ifdef __FLT16_MAX__
// The compiler's own conversion (libgcc soft-float or F16C/AVX512-FP16): an independent check.
std::uint16_t compiler_half(float x) {
  const auto h = static_cast<_Float16>(x);
  std::uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
#endif

// Compares bit patterns; NaNs only have to be NaNs of the same sign (payloads are not kept).
void check_half(float x, std::uint16_t expected) {
  const std::uint16_t got = float_to_half_bits(x);
  if (is_half_nan(expected)) {
    CHECK_MESSAGE(is_half_nan(got), "x bits ", float_bits(x));
    CHECK((got & 0x8000u) == (expected & 0x8000u));
  } else if (got != expected) {
    CHECK_MESSAGE(got == expected, "x = ", x, " bits ", float_bits(x));  // only report failures
  }
}

void check_bfloat(float x, std::uint16_t expected) {
  const std::uint16_t got = float_to_bfloat_bits(x);
  if (is_bfloat_nan(expected)) {
    CHECK_MESSAGE(is_bfloat_nan(got), "x bits ", float_bits(x));
    CHECK((got & 0x8000u) == (expected & 0x8000u));
  } else if (got != expected) {
    CHECK_MESSAGE(got == expected, "x = ", x, " bits ", float_bits(x));
  }
}

// Float values at every binary16 rounding boundary: for each pair of adjacent positive halves
// (including max -> 2^16, the overflow threshold), the exact midpoint and its two float
// neighbours, with both signs.
std::vector<float> half_boundaries() {
  std::vector<float> out;
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
    const double lo = half_value(static_cast<std::uint16_t>(h));
    const double hi = h == 0x7bffu ? 65536.0 : half_value(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 bits
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
    for (float v :
         {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), static_cast<float>(lo)}) {
      out.push_back(v);
      out.push_back(-v);
    }
  }
  return out;
}

std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out = {0.0f,
                            65504.0f,
                            std::nextafter(65520.0f, 0.0f),  // 65519.996: rounds down to max
                            65520.0f,                        // tie at the overflow edge: Inf
                            65536.0f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::denorm_min(),
                            std::ldexp(1.0f, -24),  // smallest f16 subnormal
                            std::ldexp(1.0f, -25),  // tie between 0 and it: rounds to 0
                            std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                            std::ldexp(1.0f, -14),  // smallest f16 normal
                            inf,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN(),
                            bits_float(0x7f800001u),
                            bits_float(0x7fffffffu)};
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  // Every float whose magnitude is in the f16 subnormal range or just below it, with a small
  // stride: this is where the FPU-rounding path of the conversion runs.
  for (std::uint32_t u = 0x32800000u; u < 0x38800000u; u += 61) {
    out.push_back(bits_float(u));
    out.push_back(bits_float(u | 0x80000000u));
  }
  return out;
}

}  // namespace

TEST_CASE("f16 -> float is exact for all 65536 bit patterns") {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = half_bits_to_float(bits);
    const double expected = half_value(bits);
    if (is_half_nan(bits)) {
      CHECK(std::isnan(f));
      CHECK(std::signbit(f) == ((bits & 0x8000u) != 0));
    } else if (!(static_cast<double>(f) == expected && std::signbit(f) == std::signbit(expected))) {
      FAIL_CHECK("f16 bits ", bits, " -> ", f, ", expected ", expected);
    }
#ifdef __FLT16_MAX__
    _Float16 native;
    std::memcpy(&native, &bits, sizeof native);
    if (!is_half_nan(bits) && float_bits(f) != float_bits(static_cast<float>(native))) {
      FAIL_CHECK("f16 bits ", bits, " differs from _Float16");
    }
#endif
  }
}

TEST_CASE("f16 -> float -> f16 round-trips every bit pattern") {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const std::uint16_t back = float_to_half_bits(half_bits_to_float(bits));
    if (is_half_nan(bits)) {
      CHECK(is_half_nan(back));
      CHECK((back & 0x8000u) == (bits & 0x8000u));
    } else if (back != bits) {
      FAIL_CHECK("f16 bits ", bits, " came back as ", back);
    }
  }
}

TEST_CASE("float -> f16 rounds to nearest even at every boundary") {
  for (float x : half_boundaries()) check_half(x, reference_half(x));
  for (float x : special_floats()) check_half(x, reference_half(x));
  // A few values worked out by hand, so the reference itself is anchored.
  CHECK(float_to_half_bits(1.0f) == 0x3c00u);
  CHECK(float_to_half_bits(-2.0f) == 0xc000u);
  CHECK(float_to_half_bits(65504.0f) == 0x7bffu);
  CHECK(float_to_half_bits(std::nextafter(65520.0f, 0.0f)) == 0x7bffu);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00u);
  CHECK(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00u);      // tie, even is down
  CHECK(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02u);  // tie, even is up
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000u);
  CHECK(float_to_half_bits(std::ldexp(3.0f, -26)) == 0x0001u);
  CHECK(float_to_half_bits(-0.0f) == 0x8000u);
}

TEST_CASE("float -> f16 matches the reference on a sweep of all float bit patterns") {
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += float_stride) {
    const float x = bits_float(static_cast<std::uint32_t>(u));
#ifdef __FLT16_MAX__
    check_half(x, compiler_half(x));
#else
    check_half(x, reference_half(x));
#endif
  }
}

#ifdef __FLT16_MAX__
TEST_CASE("float -> f16 matches _Float16 at every boundary") {
  // Also cross-checks reference_half, which is what platforms without _Float16 rely on.
  for (float x : half_boundaries()) check_half(x, compiler_half(x));
  for (float x : special_floats()) check_half(x, compiler_half(x));
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 65521) {
    const float x = bits_float(static_cast<std::uint32_t>(u));
    if (std::isnan(x)) continue;
    if (reference_half(x) != compiler_half(x)) FAIL_CHECK("reference_half wrong for ", x);
  }
}
#endif

TEST_CASE("bf16 -> float -> bf16 round-trips every bit pattern") {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bfloat_bits_to_float(bits);
    // bf16 is the top half of a float: same sign, exponent and leading mantissa bits.
    const std::uint16_t back = float_to_bfloat_bits(f);
    if (is_bfloat_nan(bits)) {
      CHECK(std::isnan(f));
      CHECK(is_bfloat_nan(back));
      CHECK((back & 0x8000u) == (bits & 0x8000u));
    } else if (back != bits || float_to_bfloat_bits(f) != reference_bfloat(f)) {
      FAIL_CHECK("bf16 bits ", bits, " came back as ", back);
    }
  }
  CHECK(bfloat_bits_to_float(0x3f80u) == 1.0f);
  CHECK(bfloat_bits_to_float(0xc040u) == -3.0f);
}

TEST_CASE("float -> bf16 rounds to nearest even at every boundary") {
  // For each bf16 pattern b, the floats b<<16 | low for the low halves that matter: exact, just
  // above, just below the midpoint, the midpoint (a tie), just above it, and the last one.
  for (std::uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float x = bits_float((hi << 16) | low);
      check_bfloat(x, reference_bfloat(x));
    }
  }
  CHECK(float_to_bfloat_bits(1.0f) == 0x3f80u);
  CHECK(float_to_bfloat_bits(bits_float(0x3f808000u)) == 0x3f80u);  // tie, even is down
  CHECK(float_to_bfloat_bits(bits_float(0x3f818000u)) == 0x3f82u);  // tie, even is up
  CHECK(float_to_bfloat_bits(std::numeric_limits<float>::max()) == 0x7f80u);
  CHECK(float_to_bfloat_bits(-std::numeric_limits<float>::infinity()) == 0xff80u);
  CHECK(is_bfloat_nan(float_to_bfloat_bits(bits_float(0x7f800001u))));  // payload only in low bits
}

TEST_CASE("float -> bf16 matches the reference on a sweep of all float bit patterns") {
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += float_stride) {
    const float x = bits_float(static_cast<std::uint32_t>(u));
    check_bfloat(x, reference_bfloat(x));
  }
}

TEST_CASE("f16 and bf16 value types convert through the detail functions") {
  CHECK(distcomm::f16(1.5f).bits == 0x3e00u);
  CHECK(static_cast<float>(distcomm::f16::from_bits(0x7bffu)) == 65504.0f);
  CHECK(distcomm::f16(0.1f) == distcomm::f16::from_bits(0x2e66u));
  CHECK(distcomm::f16(0.1f) != distcomm::f16::from_bits(0x2e67u));
  CHECK(distcomm::bf16(1.5f).bits == 0x3fc0u);
  CHECK(static_cast<float>(distcomm::bf16::from_bits(0x4049u)) == 3.140625f);
  CHECK(distcomm::bf16(-0.0f) == distcomm::bf16::from_bits(0x8000u));
}

TEST_CASE_TEMPLATE("dtype_of and dtype_size agree with the C++ type", T, distcomm::f16,
                   distcomm::bf16, float, double, std::int8_t, std::uint8_t, std::int32_t,
                   std::int64_t) {
  CHECK(distcomm::dtype_size(distcomm::dtype_of<T>) == sizeof(T));
  CHECK(distcomm::is_valid(distcomm::dtype_of<T>));
  CHECK(distcomm::is_floating_point(distcomm::dtype_of<T>) ==
        (std::is_floating_point_v<T> || std::is_same_v<T, distcomm::f16> ||
         std::is_same_v<T, distcomm::bf16>));
}

TEST_CASE("dtype names and invalid values") {
  using distcomm::dtype;
  const char* names[] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64"};
  int i = 0;
  for (dtype t : distcomm::all_dtypes) CHECK(std::string(distcomm::to_string(t)) == names[i++]);
  CHECK(i == 8);
  CHECK(distcomm::dtype_of<float> == dtype::f32);
  CHECK(distcomm::dtype_of<std::int64_t> == dtype::i64);
  const auto bad = static_cast<dtype>(99);
  CHECK(distcomm::dtype_size(bad) == 0);
  CHECK_FALSE(distcomm::is_valid(bad));
  CHECK(std::string(distcomm::to_string(bad)) == "invalid-dtype");
}
