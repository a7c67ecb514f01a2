// Element types DistComm reduces and moves, and the traits that map C++ types to them.
// Type-specific work funnels through (void*, count, dtype) so the templated surface stays thin.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "distcomm/core/half.hpp"

namespace distcomm {

enum class dtype : std::uint8_t { f16, bf16, f32, f64, i8, u8, i32, i64 };

inline constexpr dtype all_dtypes[] = {dtype::f16, dtype::bf16, dtype::f32, dtype::f64,
                                       dtype::i8,  dtype::u8,   dtype::i32, dtype::i64};

constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
    case dtype::bf16:
      return 2;
    case dtype::f32:
    case dtype::i32:
      return 4;
    case dtype::f64:
    case dtype::i64:
      return 8;
    case dtype::i8:
    case dtype::u8:
      return 1;
  }
  return 0;  // not a dtype: callers validate with is_valid()
}

constexpr bool is_valid(dtype t) noexcept { return dtype_size(t) != 0; }

constexpr bool is_floating_point(dtype t) noexcept {
  return t == dtype::f16 || t == dtype::bf16 || t == dtype::f32 || t == dtype::f64;
}

constexpr const char* to_string(dtype t) noexcept {
  switch (t) {
    case dtype::f16:
      return "f16";
    case dtype::bf16:
      return "bf16";
    case dtype::f32:
      return "f32";
    case dtype::f64:
      return "f64";
    case dtype::i8:
      return "i8";
    case dtype::u8:
      return "u8";
    case dtype::i32:
      return "i32";
    case dtype::i64:
      return "i64";
  }
  return "invalid-dtype";
}

// dtype_traits<T>::value is the dtype of T; undefined for types DistComm does not reduce, so
// tensor_view of an unsupported type is a compile error.
template <class T>
struct dtype_traits;

#define DISTCOMM_DTYPE_TRAIT(type, tag)        \
  template <>                                  \
  struct dtype_traits<type> {                  \
    static constexpr dtype value = dtype::tag; \
  };

DISTCOMM_DTYPE_TRAIT(f16, f16)
DISTCOMM_DTYPE_TRAIT(bf16, bf16)
DISTCOMM_DTYPE_TRAIT(float, f32)
DISTCOMM_DTYPE_TRAIT(double, f64)
DISTCOMM_DTYPE_TRAIT(std::int8_t, i8)
DISTCOMM_DTYPE_TRAIT(std::uint8_t, u8)
DISTCOMM_DTYPE_TRAIT(std::int32_t, i32)
DISTCOMM_DTYPE_TRAIT(std::int64_t, i64)
#undef DISTCOMM_DTYPE_TRAIT

template <class T>
inline constexpr dtype dtype_of = dtype_traits<T>::value;

}  // namespace distcomm
