// How DistComm splits `count` elements into `parts` near-equal contiguous blocks (the first
// count % parts blocks get one extra element). Every strategy and backend uses this one rule, so
// ranks always agree on who owns which elements.
#pragma once

#include <cstddef>

namespace distcomm {

struct block {
  std::size_t begin = 0;  // first element
  std::size_t count = 0;  // elements
};

constexpr block partition(std::size_t count, std::size_t parts, std::size_t index) noexcept {
  const std::size_t base = count / parts;
  const std::size_t extra = count % parts;
  const std::size_t begin = index * base + (index < extra ? index : extra);
  return block{begin, base + (index < extra ? 1 : 0)};
}

}  // namespace distcomm
