// Tensor Fusion for device memory: fusion::buffer's grouping (by dtype, then call order, at most
// `threshold` bytes per group) with the copies done by one batched CUDA kernel per group and
// direction, and a gradient pre-/post-scaling fused into those copies (e.g. pre_scale 1/N before
// a sum to keep f16 in range). The device buffer grows to the largest group and is then reused.
// Everything is enqueued on the stream given; nothing here waits for the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "distcomm/backends/cuda_kernels.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"

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

}  // namespace distcomm::cuda
