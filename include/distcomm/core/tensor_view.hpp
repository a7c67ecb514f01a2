// tensor_view: a non-owning description of a contiguous tensor (pointer, element count, dtype,
// and where the memory lives). It is what every collective takes; DistComm never owns user data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "distcomm/core/dtype.hpp"

namespace distcomm {

enum class memory_kind : std::uint8_t { host, cuda };

constexpr const char* to_string(memory_kind m) noexcept {
  return m == memory_kind::host ? "host" : "cuda";
}

struct tensor_view {
  void* data = nullptr;
  std::size_t count = 0;  // elements, not bytes
  dtype type = dtype::f32;
  memory_kind memory = memory_kind::host;
  int device = -1;  // CUDA device ordinal for memory_kind::cuda; -1 for host memory

  // Bytes covered; saturates at SIZE_MAX so an overflowing count is caught by validation.
  std::size_t bytes() const noexcept {
    const std::size_t es = dtype_size(type);
    if (es == 0) return 0;
    if (count > std::numeric_limits<std::size_t>::max() / es) {
      return std::numeric_limits<std::size_t>::max();
    }
    return count * es;
  }
};

// view(ptr, n) / view(vector): the usual way to make a tensor_view of host memory. A view of
// const data may be passed as the input of an out-of-place collective; DistComm never writes it.
template <class T>
tensor_view view(T* data, std::size_t count) noexcept {
  return tensor_view{static_cast<void*>(data), count, dtype_of<T>, memory_kind::host, -1};
}

template <class T>
tensor_view view(const T* data, std::size_t count) noexcept {
  return view(const_cast<T*>(data), count);
}

template <class T, class A>
tensor_view view(std::vector<T, A>& v) noexcept {
  return view(v.data(), v.size());
}

template <class T, class A>
tensor_view view(const std::vector<T, A>& v) noexcept {
  return view(v.data(), v.size());
}

// A view of device memory (used by GPU backends).
inline tensor_view cuda_view(void* data, std::size_t count, dtype type, int device) noexcept {
  return tensor_view{data, count, type, memory_kind::cuda, device};
}

}  // namespace distcomm
