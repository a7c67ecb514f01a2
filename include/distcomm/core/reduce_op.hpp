// Reduction operations. avg is sum followed by one division by the number of ranks (integer
// dtypes divide with truncation toward zero).
#pragma once

#include <cstdint>

namespace distcomm {

enum class reduce_op : std::uint8_t { sum, avg, min, max, prod };

inline constexpr reduce_op all_reduce_ops[] = {reduce_op::sum, reduce_op::avg, reduce_op::min,
                                               reduce_op::max, reduce_op::prod};

constexpr bool is_valid(reduce_op op) noexcept {
  return static_cast<std::uint8_t>(op) <= static_cast<std::uint8_t>(reduce_op::prod);
}

constexpr const char* to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::avg:
      return "avg";
    case reduce_op::min:
      return "min";
    case reduce_op::max:
      return "max";
    case reduce_op::prod:
      return "prod";
  }
  return "invalid-op";
}

}  // namespace distcomm
