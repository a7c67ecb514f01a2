// Elementwise reduction kernels: the only dtype-specific arithmetic in DistComm. Strategies call
// these on raw byte ranges; each (dtype, op) pair is one vectorizable loop in src/core/reduce.cpp.
// Buffers passed to one call must be either identical or disjoint (no partial overlap).
#pragma once

#include <cstddef>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm {

// dst[i] = a[i] (op) b[i] for i < count. reduce_op::avg combines as sum (the division is a separate
// finishing step, see divide()). f16/bf16 combine through float and round to nearest even once
// per element per call. Integer sum/prod wrap around (two's complement) instead of overflowing.
void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op);

// dst[i] = src[i] / divisor: the finishing step of reduce_op::avg. Integers truncate toward zero.
void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor);

// dst = in[0] op in[1] op ... op in[n-1], a left fold in the given order (rank order), computed
// block by block in cache. dst may be identical to one of the inputs. Every deterministic path
// (and the local backend's shared-memory collectives) reduces through this one function, which is
// why their results agree bit for bit. n == 1 copies; n == 0 is invalid.
void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
          reduce_op op);

}  // namespace distcomm
