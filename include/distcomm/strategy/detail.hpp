// Building blocks shared by the strategies: message tags, a reusable scratch buffer, segment
// arithmetic, and the memory operations policy through which the algorithms touch buffers. Not
// part of the public API.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/core/reduce_op.hpp"

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
  tag_recursive_doubling = 10,
  tag_alltoall = 11,
  tag_alltoall_counts = 12,
  tag_bruck = 13,
  tag_gather = 14,
  tag_scatter = 15,
  tag_allgatherv = 16,
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

// What a backend declares about itself (the contract's traits): backend.hpp.
using distcomm::detail::has_memory_ops;
using distcomm::detail::moves_device_memory;

// The memory operations policy of a host-memory backend: the host kernels of core/reduce.hpp, and
// scratch space owned by the strategy. Every member is an inline forwarder, so the algorithms
// compile to the same calls as when they named these functions directly.
class host_memory {
 public:
  explicit host_memory(detail::scratch& s) noexcept : s_(&s) {}
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  static void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t,
                      reduce_op op) {
    distcomm::combine(dst, a, b, count, t, op);
  }
  static void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor) {
    distcomm::divide(dst, src, count, t, divisor);
  }
  static void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
                   reduce_op op) {
    distcomm::fold(dst, in, n, count, t, op);
  }
  unsigned char* scratch(std::size_t bytes) { return s_->get(bytes); }
  static void complete(deadline) noexcept {}  // host work is done when the call returns

 private:
  detail::scratch* s_;
};

// A host backend's own wrapper of host_memory (`b.host_memory(scratch&)`): check::gated's, which
// ends the call's agreement before anything is written.
template <class B, class = void>
struct wraps_host_memory : std::false_type {};
template <class B>
struct wraps_host_memory<
    B, std::void_t<decltype(std::declval<B&>().host_memory(std::declval<scratch&>()))>>
    : std::true_type {};

// The policy for backend B, chosen at compile time: host_memory over the strategy's scratch (or
// the backend's wrapper of it), or the operations of a device-memory backend (`b.memory()`, see
// backend.hpp), which enqueue on the backend's stream and own their scratch space.
template <class B>
decltype(auto) memory_of(B& b, scratch& s) {
  if constexpr (moves_device_memory<B>::value) {
    static_assert(has_memory_ops<B>::value,
                  "a backend that moves device memory needs memory() (backend.hpp) for the "
                  "point-to-point strategies; use strategy::native with it otherwise");
    return b.memory();
  } else if constexpr (wraps_host_memory<B>::value) {
    return b.host_memory(s);
  } else {
    return host_memory(s);
  }
}

// On a device-memory backend, point-to-point operations are assumed to behave as NCCL's do: they
// are queued, issued as one group at the first wait, a request completes with its whole group,
// and groups run one after the other in stream order. A receive posted steps ahead of the send
// that feeds it would then sit in a group that can only finish after a later group: so on such a
// backend the algorithms post round by round, every round one group whose receives are matched by
// the same round's sends on the peers (see algorithms/common.hpp).
template <class B>
inline constexpr bool lockstep = moves_device_memory<B>::value;

using distcomm::default_segment_bytes;
using distcomm::segment_bytes_for;

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
