#include <algorithm>
#include <cstring>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"

namespace distcomm {
namespace {

// Small enough to stay in L1 while the inputs stream through.
constexpr std::size_t fold_block_bytes = 16384;

}  // namespace

void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
          reduce_op op) {
  if (n == 0) throw invalid_argument_error("fold: no inputs");
  const std::size_t es = dtype_size(t);
  if (es == 0) throw invalid_argument_error("fold: invalid dtype");
  if (count == 0) return;
  if (n == 1) {
    if (dst != in[0]) std::memcpy(dst, in[0], count * es);
    return;
  }
  if (n == 2) {
    combine(dst, in[0], in[1], count, t, op);
    return;
  }
  // The accumulator lives in a scratch block, not in dst, because dst may alias an input that
  // the fold has not read yet.
  alignas(64) static thread_local unsigned char tmp[fold_block_bytes];
  const std::size_t per_block = fold_block_bytes / es;
  for (std::size_t done = 0; done < count; done += per_block) {
    const std::size_t m = std::min(per_block, count - done);
    const std::size_t off = done * es;
    const auto at = [&](std::size_t r) { return static_cast<const unsigned char*>(in[r]) + off; };
    combine(tmp, at(0), at(1), m, t, op);
    for (std::size_t r = 2; r + 1 < n; ++r) combine(tmp, tmp, at(r), m, t, op);
    combine(static_cast<unsigned char*>(dst) + off, tmp, at(n - 1), m, t, op);
  }
}

}  // namespace distcomm
