// CUDA counterparts of core/reduce.hpp and of fusion's pack/unpack copies, for buffers in device
// memory. Every function only enqueues work on `stream` (asynchronous to the host) and has the
// host version's semantics: f16/bf16 combine through float and round to nearest even once per
// element, integer sum/prod wrap, min/max propagate NaN, integer division truncates toward zero.
// Pointers need only the alignment of their element type.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm::cuda {

// dst[i] = a[i] (op) b[i]; avg combines as sum (divide() finishes it). Buffers are identical or
// disjoint, as for distcomm::combine.
void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op,
             cudaStream_t stream);

// distcomm::fold on the device: dst = in[0] (op) in[1] (op) ... (op) in[n-1], left to right,
// rounding after every step, so the same bits as the host fold. Three or more inputs go through
// `acc` (count elements, neither dst nor an input: dst may be an input not read yet); with fewer
// `acc` is not touched and may be null.
void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
          reduce_op op, void* acc, cudaStream_t stream);

// dst[i] = src[i] / divisor (divisor >= 1).
void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor,
            cudaStream_t stream);

// One tensor of a batched pack or unpack: `count` elements at `data`, and where they sit in the
// packed buffer (`offset`, in elements).
struct copy_segment {
  void* data = nullptr;
  std::size_t count = 0;
  std::size_t offset = 0;
};

// The most segments one kernel launch carries (they travel as a kernel parameter, so no
// descriptor upload and no synchronisation is needed); longer lists take several launches.
inline constexpr std::size_t max_segments_per_launch = 96;

// packed[offset + i] = segment.data[i] * scale for every segment, in ceil(n / 96) launches.
// scale != 1 needs a floating-point dtype (invalid_argument_error otherwise); with scale == 1 the
// copy is exact for every dtype (no round trip through float).
void pack(const copy_segment* segments, std::size_t n, void* packed, dtype t, double scale,
          cudaStream_t stream);

// segment.data[i] = packed[offset + i] * scale: the inverse of pack.
void unpack(const copy_segment* segments, std::size_t n, const void* packed, dtype t, double scale,
            cudaStream_t stream);

}  // namespace distcomm::cuda
