// Tensor Fusion for device memory: fusion::buffer's grouping (by dtype, then call order, at most
// `threshold` bytes per group) with the copies done by one batched CUDA kernel per group and
// direction, and a gradient pre-/post-scaling fused into those copies (e.g. pre_scale 1/N before
// a sum to keep f16 in range). The device buffer grows to the largest group and is then reused.
// Everything is enqueued on the stream given; nothing here waits for the device.
// cuda::fusion wraps it as the Fusion policy of a communicator on a device-memory backend:
// communicator<nccl_backend, strategy::native, cuda::fusion>.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/cuda/kernels.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::cuda {

class fusion_buffer {
 public:
  explicit fusion_buffer(std::size_t threshold_bytes) : threshold_(threshold_bytes) {}
  fusion_buffer(const fusion_buffer&) = delete;
  fusion_buffer& operator=(const fusion_buffer&) = delete;
  ~fusion_buffer();

  std::size_t threshold() const noexcept { return threshold_; }
  std::size_t capacity() const noexcept { return capacity_; }

  // For each group: pack (x pre_scale), run(packed, packed, count, dtype, op, stream), unpack
  // (x post_scale). A tensor of at least `threshold` bytes is scaled and reduced in place. Every
  // tensor must be in CUDA memory (invalid_argument_error otherwise); scales other than 1 need
  // floating-point tensors.
  template <class Run>
  void allreduce(span<const tensor_view> tensors, reduce_op op, cudaStream_t stream,
                 double pre_scale, double post_scale, Run&& run) {
    check(tensors);
    for (dtype t : all_dtypes) {
      std::size_t first = 0;
      while (next_group(tensors, t, first)) {
        if (segments_.size() == 1 && group_bytes_ >= threshold_) {
          copy_segment in_place = segments_.front();
          in_place.offset = 0;
          if (pre_scale != 1.0) pack(&in_place, 1, in_place.data, t, pre_scale, stream);
          run(in_place.data, in_place.data, in_place.count, t, op, stream);
          if (post_scale != 1.0) unpack(&in_place, 1, in_place.data, t, post_scale, stream);
          continue;
        }
        void* packed = reserve(group_bytes_);
        pack(segments_.data(), segments_.size(), packed, t, pre_scale, stream);
        run(packed, packed, group_bytes_ / dtype_size(t), t, op, stream);
        unpack(segments_.data(), segments_.size(), packed, t, post_scale, stream);
      }
    }
  }

 private:
  static void check(span<const tensor_view> tensors);
  // Collects into segments_ the next group of dtype t, starting the scan at index `first`
  // (advanced past it); false when none is left.
  bool next_group(span<const tensor_view> tensors, dtype t, std::size_t& first);
  void* reserve(std::size_t bytes);

  std::size_t threshold_;
  void* storage_ = nullptr;
  std::size_t capacity_ = 0;
  std::vector<copy_segment> segments_;
  std::size_t group_bytes_ = 0;
};

// The Fusion policy for backends that move device memory and have a stream() and memory()
// (nccl_backend, cuda::host_staged<B>). The communicator hands it the backend and the call's
// deadline (takes_backend), so packing, the collectives and unpacking share the backend's stream.
//
// Cutoff: every tensor below DISTCOMM_FUSION_THRESHOLD (default 64 MiB) is packed; the host
// policy's DISTCOMM_FUSION_CUTOFF is ignored. On the host a packed byte is copied twice at a few
// GB/s, which outweighs a collective's fixed cost past about 1 MiB; here all tensors of a group
// move in one kernel launch at device bandwidth (1 MiB in and out is under a microsecond of
// traffic at an H100's 3 TB/s, plus a launch of a few microseconds per direction), while every
// collective avoided saves NCCL's launch and synchronisation time (tens of microseconds).
// Threshold 0 disables fusion.
//
// avg reaches the strategy as avg, not as a sum with 1/N fused into the unpack: strategy::native
// uses ncclAvg, which NCCL applies inside its reduction kernel at no extra pass; ring, tree and
// parameter_server divide exactly as on the host; and integer avg needs a truncating division,
// which a floating-point scale cannot give. x * (1/N) also rounds differently from x / N when N
// is not a power of two, so a fused scale would break bit-for-bit agreement with host backends.
//
// A grouped allreduce returns once the unpacking has run (memory().complete(until)), so the
// tensors can be read on any stream afterwards.
class fusion {
 public:
  static constexpr const char* name = "cuda";
  static constexpr bool takes_backend = true;
  explicit fusion(const config& c) : buffer_(c.fusion_threshold) {}

  std::size_t threshold() const noexcept { return buffer_.threshold(); }
  // Device bytes held for packing: grows to the largest group, then is reused.
  std::size_t capacity() const noexcept { return buffer_.capacity(); }

  // run(in, out, count, dtype, op) performs one allreduce on b's stream.
  template <class Backend, class Run>
  void allreduce(Backend& b, span<const tensor_view> tensors, reduce_op op, deadline until,
                 Run&& run) {
    static_assert(distcomm::detail::moves_device_memory<Backend>::value,
                  "cuda::fusion packs CUDA memory; on a host-memory backend use fusion::buffer");
    auto memory = b.memory();  // makes the backend's device current for the packing buffer
    buffer_.allreduce(tensors, op, b.stream(), 1.0, 1.0,
                      [&](const void* in, void* out, std::size_t count, dtype t, reduce_op o,
                          cudaStream_t) { run(in, out, count, t, o); });
    memory.complete(until);
  }

 private:
  fusion_buffer buffer_;
};

}  // namespace distcomm::cuda
