// 16-bit floating point value types: f16 (IEEE 754 binary16) and bf16 (bfloat16).
// They are storage types: arithmetic happens in float, and float -> 16-bit conversion rounds to
// nearest, ties to even, with overflow to infinity and NaN kept NaN (quiet).
#pragma once

#include <cstdint>
#include <cstring>

namespace distcomm {

namespace detail {

inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// c ? x : y written with masks. A plain ?: becomes a branch once GCC sinks the float operation
// that only one side needs into it, and GCC does not if-convert conditional float operations
// (they might trap under -ftrapping-math): the loop would then not vectorize.
inline std::uint32_t select_bits(bool c, std::uint32_t x, std::uint32_t y) noexcept {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (x & m) | (y & ~m);
}

// Branch-free conversions (after F. Giesen's public-domain half <-> float routines), written so
// GCC vectorizes loops over them at -O3 for baseline x86-64 (checked with -fopt-info-vec).
inline float half_bits_to_float(std::uint16_t h) noexcept {
  constexpr std::uint32_t shifted_exp = 0x7c00u << 13;
  const std::uint32_t em = (h & 0x7fffu) << 13;  // exponent and mantissa bits
  const std::uint32_t exp = shifted_exp & em;
  const std::uint32_t normal = em + ((127u - 15u) << 23);
  const std::uint32_t inf_nan = normal + ((128u - 16u) << 23);
  // Zero / subnormal: renormalise through a float subtraction, computed for every input (see
  // select_bits).
  const std::uint32_t subnormal =
      float_bits(bits_float(normal + (1u << 23)) - bits_float(113u << 23));
  const std::uint32_t o =
      select_bits(exp == shifted_exp, inf_nan, select_bits(exp == 0, subnormal, normal));
  return bits_float(o | (static_cast<std::uint32_t>(h & 0x8000u) << 16));
}

inline std::uint16_t float_to_half_bits(float value) noexcept {
  constexpr std::uint32_t f32_infinity = 255u << 23;
  constexpr std::uint32_t f16_max = (127u + 16u) << 23;
  constexpr std::uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t f = float_bits(value);
  const std::uint32_t sign = f & 0x80000000u;
  f ^= sign;
  // All three candidates are computed and one selected, branch-free (see select_bits). They are
  // built in the upper 16 bits and shifted down once at the end: with the result in the low
  // bits, GCC narrows every intermediate to 16 bits separately, which costs SSE2 (no packusdw)
  // about half the loop's time.
  // NaN -> quiet NaN, too large -> Inf.
  const std::uint32_t inf_nan = f > f32_infinity ? 0x7e000000u : 0x7c000000u;
  // Subnormal or zero: adding the magic number lets the FPU round the mantissa (ties to even).
  const std::uint32_t subnormal =
      (float_bits(bits_float(f) + bits_float(denorm_magic)) - denorm_magic) << 16;
  // Normal: rebias the exponent and round to nearest even (a carry may round up to Inf); bits
  // 13..28 become the result.
  const std::uint32_t mant_odd = (f >> 13) & 1u;
  const std::uint32_t normal = (f + ((15u - 127u) << 23) + 0xfffu + mant_odd) << 3;
  const std::uint32_t o =
      select_bits(f >= f16_max, inf_nan, select_bits(f < (113u << 23), subnormal, normal));
  return static_cast<std::uint16_t>((o | sign) >> 16);
}

inline float bfloat_bits_to_float(std::uint16_t b) noexcept {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bfloat_bits(float value) noexcept {
  const std::uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN stays NaN (quiet)
  }
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace detail

// IEEE 754 binary16.
struct f16 {
  std::uint16_t bits = 0;

  f16() = default;
  explicit f16(float v) noexcept : bits(detail::float_to_half_bits(v)) {}
  static f16 from_bits(std::uint16_t b) noexcept {
    f16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const noexcept { return detail::half_bits_to_float(bits); }
  friend bool operator==(f16 a, f16 b) noexcept { return a.bits == b.bits; }
  friend bool operator!=(f16 a, f16 b) noexcept { return a.bits != b.bits; }
};

// bfloat16: the upper half of an IEEE 754 binary32.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  explicit bf16(float v) noexcept : bits(detail::float_to_bfloat_bits(v)) {}
  static bf16 from_bits(std::uint16_t b) noexcept {
    bf16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const noexcept { return detail::bfloat_bits_to_float(bits); }
  friend bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }
  friend bool operator!=(bf16 a, bf16 b) noexcept { return a.bits != b.bits; }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2, "16-bit types must stay 2 bytes");

}  // namespace distcomm
