// Building blocks shared by the strategies: message tags, a reusable scratch buffer, segment
// arithmetic. Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/partition.hpp"

namespace distcomm::strategy::detail {

// One tag per algorithm phase. Messages of one phase between two ranks are matched in posting
// order (the backend contract), so no per-message tag is needed.
enum tags : tag_t {
  tag_ring_reduce_scatter = 1,
  tag_ring_allgather = 2,
  tag_tree_up = 3,
  tag_tree_down = 4,
  tag_ps_push = 5,
  tag_ps_pull = 6,
  tag_broadcast = 7,
  tag_barrier = 8,
  tag_ordered = 9,
};

// A grow-only, 64-byte aligned buffer owned by a strategy or fusion object and reused across
// calls, so the hot path does not allocate once warm.
class scratch {
 public:
  unsigned char* get(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<unsigned char*>(::operator new (bytes, std::align_val_t{64})));
      size_ = bytes;
    }
    return data_.get();
  }
  std::size_t capacity() const noexcept { return size_; }

 private:
  struct deleter {
    void operator()(unsigned char* p) const noexcept {
      ::operator delete (p, std::align_val_t{64});
    }
  };
  std::unique_ptr<unsigned char, deleter> data_;
  std::size_t size_ = 0;
};

inline std::size_t segment_elems(std::size_t segment_bytes, dtype t) noexcept {
  const std::size_t n = segment_bytes / dtype_size(t);
  return n == 0 ? 1 : n;
}

inline std::size_t segments_of(std::size_t count, std::size_t seg) noexcept {
  return (count + seg - 1) / seg;
}

inline int mod(int a, int p) noexcept { return ((a % p) + p) % p; }

template <class Request>
void wait_all(std::vector<Request>& requests, deadline until) {
  for (Request& r : requests) r.wait(until);
  requests.clear();
}

inline unsigned char* bytes_at(void* base, std::size_t elems, std::size_t es) noexcept {
  return static_cast<unsigned char*>(base) + elems * es;
}
inline const unsigned char* bytes_at(const void* base, std::size_t elems, std::size_t es) noexcept {
  return static_cast<const unsigned char*>(base) + elems * es;
}

}  // namespace distcomm::strategy::detail
