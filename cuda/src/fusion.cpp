#include "distcomm/cuda/fusion.hpp"

#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/cuda/check.hpp"

namespace distcomm::cuda {

fusion_buffer::~fusion_buffer() {
  if (storage_ != nullptr) cudaFree(storage_);
}

void fusion_buffer::check(span<const tensor_view> tensors) {
  for (const tensor_view& v : tensors) {
    if (v.count != 0 && v.memory != memory_kind::cuda) {
      throw invalid_argument_error(std::string("cuda::fusion_buffer: a tensor in ") +
                                   to_string(v.memory) +
                                   " memory; device fusion needs CUDA memory");
    }
    if (!is_valid(v.type)) {
      throw invalid_argument_error("cuda::fusion_buffer: invalid dtype value " +
                                   std::to_string(static_cast<int>(v.type)));
    }
    if (v.count != 0 && v.data == nullptr) {
      throw invalid_argument_error("cuda::fusion_buffer: null data with count " +
                                   std::to_string(v.count));
    }
  }
}

bool fusion_buffer::next_group(span<const tensor_view> tensors, dtype t, std::size_t& first) {
  segments_.clear();
  group_bytes_ = 0;
  const std::size_t es = dtype_size(t);
  for (; first < tensors.size(); ++first) {
    const tensor_view& v = tensors[first];
    if (v.type != t || v.count == 0) continue;
    const std::size_t bytes = v.bytes();
    if (bytes >= threshold_) {  // a large tensor is a group of its own, never packed
      if (!segments_.empty()) break;
      segments_.push_back({v.data, v.count, 0});
      group_bytes_ = bytes;
      ++first;
      break;
    }
    if (group_bytes_ + bytes > threshold_) break;
    segments_.push_back({v.data, v.count, group_bytes_ / es});
    group_bytes_ += bytes;
  }
  return !segments_.empty();
}

void* fusion_buffer::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return storage_;
  if (storage_ != nullptr) {
    // cudaFree waits for the device, so work still reading the old buffer finishes first.
    detail::check_cuda(cudaFree(storage_), "cudaFree");
    storage_ = nullptr;
    capacity_ = 0;
  }
  detail::check_cuda(cudaMalloc(&storage_, bytes), "cudaMalloc");
  capacity_ = bytes;
  return storage_;
}

}  // namespace distcomm::cuda
