// The device versions of combine / divide / pack / unpack. One grid-stride loop per (dtype, op),
// instantiated from small templates; f16/bf16 load through float as the host kernels do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "distcomm/core/error.hpp"
#include "distcomm/cuda/check.hpp"
#include "distcomm/cuda/kernels.hpp"

namespace distcomm::cuda {
namespace {

constexpr unsigned threads_per_block = 256;
// Enough resident blocks to saturate an H100's memory (132 SMs x 8 blocks of 256 threads, with
// each thread looping); more only adds scheduling work.
constexpr std::size_t max_blocks = 132 * 8;

unsigned blocks_for(std::size_t count) {
  const std::size_t b = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::clamp<std::size_t>(b, 1, max_blocks));
}

// ---- element access: storage type and the type arithmetic happens in ------------------------

template <class T>
struct plain {
  using storage = T;
  using compute = T;
  static __device__ T load(T x) { return x; }
  static __device__ T store(T x) { return x; }
};

struct half_access {
  using storage = std::uint16_t;
  using compute = float;
  static __device__ float load(std::uint16_t x) { return __half2float(__ushort_as_half(x)); }
  static __device__ std::uint16_t store(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

struct bfloat_access {
  using storage = std::uint16_t;
  using compute = float;
  static __device__ float load(std::uint16_t x) {
    return __bfloat162float(__ushort_as_bfloat16(x));
  }
  static __device__ std::uint16_t store(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

// ---- operations (as in src/core/reduce.cpp) ----------------------------------------------------

// Integer sum and product in the unsigned type, so that overflow wraps instead of being UB.
template <class T>
using arith_t = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                            std::common_type<T>>::type;

struct op_sum {
  template <class T>
  static __device__ T apply(T a, T b) {
    return static_cast<T>(
        static_cast<arith_t<T>>(static_cast<arith_t<T>>(a) + static_cast<arith_t<T>>(b)));
  }
};
struct op_prod {
  template <class T>
  static __device__ T apply(T a, T b) {
    return static_cast<T>(
        static_cast<arith_t<T>>(static_cast<arith_t<T>>(a) * static_cast<arith_t<T>>(b)));
  }
};
struct op_min {
  template <class T>
  static __device__ T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;  // a NaN on either side wins
    } else {
      return a < b ? a : b;
    }
  }
};
struct op_max {
  template <class T>
  static __device__ T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

// ---- kernels -----------------------------------------------------------------------------------

template <class Access, class Op>
__global__ void combine_kernel(typename Access::storage* dst, const typename Access::storage* a,
                               const typename Access::storage* b, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = Access::store(Op::apply(Access::load(a[i]), Access::load(b[i])));
  }
}

template <class Access>
__global__ void divide_kernel(typename Access::storage* dst, const typename Access::storage* src,
                              std::size_t n, typename Access::compute divisor) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = Access::store(Access::load(src[i]) / divisor);
  }
}

// A divisor larger than T's maximum: every quotient is 0, except min / |min| == -1.
template <class T>
__global__ void divide_overflow_kernel(T* dst, const T* src, std::size_t n, bool is_abs_min,
                                       T min) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = (is_abs_min && src[i] == min) ? T(-1) : T(0);
  }
}

struct segments_param {
  copy_segment s[max_segments_per_launch];
};

// blockIdx.y picks the segment; the x blocks stride over its elements. Pack reads the tensors
// and writes the packed buffer, unpack the other way round; Scaled multiplies on the way.
template <class Access, bool Pack, bool Scaled>
__global__ void copy_kernel(segments_param p, typename Access::storage* packed,
                            typename Access::compute scale) {
  using S = typename Access::storage;
  const copy_segment seg = p.s[blockIdx.y];
  S* tensor = static_cast<S*>(seg.data);
  S* slot = packed + seg.offset;
  const S* from = Pack ? tensor : slot;
  S* to = Pack ? slot : tensor;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < seg.count; i += stride) {
    if constexpr (Scaled) {
      to[i] = Access::store(Access::load(from[i]) * scale);
    } else {
      to[i] = from[i];
    }
  }
}

// ---- dispatch ----------------------------------------------------------------------------------

void check_launch(const char* what) { detail::check_cuda(cudaGetLastError(), what); }

void check_args(const char* what, dtype t, std::size_t count, const void* p1, const void* p2,
                const void* p3) {
  if (!is_valid(t)) {
    throw invalid_argument_error(std::string("cuda::") + what + ": invalid dtype value " +
                                 std::to_string(static_cast<int>(t)));
  }
  if (count != 0 && (p1 == nullptr || p2 == nullptr || p3 == nullptr)) {
    throw invalid_argument_error(std::string("cuda::") + what + ": null pointer with count " +
                                 std::to_string(count));
  }
}

// Calls f(Access{}) with the access type of dtype t.
template <class F>
void with_access(dtype t, F&& f) {
  switch (t) {
    case dtype::f16:
      return f(half_access{});
    case dtype::bf16:
      return f(bfloat_access{});
    case dtype::f32:
      return f(plain<float>{});
    case dtype::f64:
      return f(plain<double>{});
    case dtype::i8:
      return f(plain<std::int8_t>{});
    case dtype::u8:
      return f(plain<std::uint8_t>{});
    case dtype::i32:
      return f(plain<std::int32_t>{});
    case dtype::i64:
      return f(plain<std::int64_t>{});
  }
}

template <class Access, class Op>
void launch_combine(void* dst, const void* a, const void* b, std::size_t n, cudaStream_t s) {
  using S = typename Access::storage;
  combine_kernel<Access, Op><<<blocks_for(n), threads_per_block, 0, s>>>(
      static_cast<S*>(dst), static_cast<const S*>(a), static_cast<const S*>(b), n);
}

template <class Access>
void launch_divide(void* dst, const void* src, std::size_t n, std::size_t divisor, cudaStream_t s) {
  using S = typename Access::storage;
  using C = typename Access::compute;
  if constexpr (std::is_integral_v<C>) {
    constexpr auto max = static_cast<std::size_t>(std::numeric_limits<C>::max());
    if (divisor > max) {
      const bool abs_min = std::is_signed_v<C> && divisor == max + 1;
      divide_overflow_kernel<C><<<blocks_for(n), threads_per_block, 0, s>>>(
          static_cast<C*>(dst), static_cast<const C*>(src), n, abs_min,
          std::numeric_limits<C>::min());
      return;
    }
  }
  divide_kernel<Access><<<blocks_for(n), threads_per_block, 0, s>>>(
      static_cast<S*>(dst), static_cast<const S*>(src), n, static_cast<C>(divisor));
}

template <bool Pack>
void batched_copy(const char* what, const copy_segment* segments, std::size_t n, void* packed,
                  dtype t, double scale, cudaStream_t stream) {
  check_args(what, t, n, segments, packed, packed);
  if (scale != 1.0 && !is_floating_point(t)) {
    throw invalid_argument_error(std::string("cuda::") + what + ": scale " + std::to_string(scale) +
                                 " on integer dtype " + to_string(t) +
                                 "; scaling needs a floating-point dtype");
  }
  for (std::size_t first = 0; first < n; first += max_segments_per_launch) {
    const std::size_t k = std::min(max_segments_per_launch, n - first);
    segments_param p{};
    std::size_t largest = 0;
    for (std::size_t j = 0; j < k; ++j) {
      p.s[j] = segments[first + j];
      if (p.s[j].count != 0 && p.s[j].data == nullptr) {
        throw invalid_argument_error(std::string("cuda::") + what + ": segment " +
                                     std::to_string(first + j) + " has null data and count " +
                                     std::to_string(p.s[j].count));
      }
      largest = std::max(largest, p.s[j].count);
    }
    if (largest == 0) continue;
    const dim3 grid(std::max(1u, blocks_for(largest) / static_cast<unsigned>(k)),
                    static_cast<unsigned>(k));
    with_access(t, [&](auto access) {
      using A = decltype(access);
      using S = typename A::storage;
      using C = typename A::compute;
      auto* buf = static_cast<S*>(packed);
      if (scale == 1.0) {
        copy_kernel<A, Pack, false><<<grid, threads_per_block, 0, stream>>>(p, buf, C{});
      } else if constexpr (!std::is_integral_v<C>) {
        copy_kernel<A, Pack, true>
            <<<grid, threads_per_block, 0, stream>>>(p, buf, static_cast<C>(scale));
      }
    });
    check_launch(Pack ? "cuda pack kernel launch" : "cuda unpack kernel launch");
  }
}

}  // namespace

void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op,
             cudaStream_t stream) {
  check_args("combine", t, count, dst, a, b);
  if (!is_valid(op)) {
    throw invalid_argument_error("cuda::combine: invalid reduce_op value " +
                                 std::to_string(static_cast<int>(op)));
  }
  if (count == 0) return;
  with_access(t, [&](auto access) {
    using A = decltype(access);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg:  // avg combines as sum; divide() finishes it
        return launch_combine<A, op_sum>(dst, a, b, count, stream);
      case reduce_op::prod:
        return launch_combine<A, op_prod>(dst, a, b, count, stream);
      case reduce_op::min:
        return launch_combine<A, op_min>(dst, a, b, count, stream);
      case reduce_op::max:
        return launch_combine<A, op_max>(dst, a, b, count, stream);
    }
  });
  check_launch("cuda combine kernel launch");
}

void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
          reduce_op op, void* acc, cudaStream_t stream) {
  if (n == 0) throw invalid_argument_error("cuda::fold: no inputs");
  if (count == 0) return;
  if (n == 1) {
    if (dst != in[0]) {
      detail::check_cuda(cudaMemcpyAsync(dst, in[0], count * dtype_size(t),
                                         cudaMemcpyDeviceToDevice, stream),
                         "cudaMemcpyAsync");
    }
    return;
  }
  if (n == 2) return combine(dst, in[0], in[1], count, t, op, stream);
  check_args("fold", t, count, acc, dst, dst);
  combine(acc, in[0], in[1], count, t, op, stream);
  for (std::size_t r = 2; r + 1 < n; ++r) combine(acc, acc, in[r], count, t, op, stream);
  combine(dst, acc, in[n - 1], count, t, op, stream);
}

void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor,
            cudaStream_t stream) {
  check_args("divide", t, count, dst, src, src);
  if (divisor == 0) {
    throw invalid_argument_error(
        "cuda::divide: divisor is 0 (avg needs the number of contributing ranks, at least 1)");
  }
  if (count == 0) return;
  with_access(
      t, [&](auto access) { launch_divide<decltype(access)>(dst, src, count, divisor, stream); });
  check_launch("cuda divide kernel launch");
}

void pack(const copy_segment* segments, std::size_t n, void* packed, dtype t, double scale,
          cudaStream_t stream) {
  batched_copy<true>("pack", segments, n, packed, t, scale, stream);
}

void unpack(const copy_segment* segments, std::size_t n, const void* packed, dtype t, double scale,
            cudaStream_t stream) {
  batched_copy<false>("unpack", segments, n, const_cast<void*>(packed), t, scale, stream);
}

}  // namespace distcomm::cuda
