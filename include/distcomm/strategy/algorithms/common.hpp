// What every point-to-point algorithm (strategy/algorithms/) shares: the reduction arguments, the
// copy and avg steps written against the memory operations policy, and the segments of a block
// with the loops that post one send or receive per segment. Not part of the public API.
//
// The algorithms are written once against the backend contract (backend.hpp). Every copy,
// reduction and scratch allocation goes through the memory operations policy of the backend
// (memory_of in detail.hpp): inline host kernels for host memory, the backend's own device
// operations for device memory.
//
// Device-memory backends queue their sends and receives and issue them as one group at the first
// wait (lockstep, detail.hpp). Where posting ahead would put a receive in a group that can only
// complete after a later group of the same or another rank, the algorithm has a lockstep variant;
// each such place says why the other algorithms need none. The argument throughout: if every
// group's sends and receives are matched by groups of the peers that are issued without waiting
// for anything later, then by induction on the group index every group completes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

// Arguments every reduction algorithm takes.
struct reduce_args {
  dtype type;
  reduce_op op;
  std::size_t seg;  // segment, elements
  deadline until;
};

template <class M>
void copy_elems(M&& m, void* dst, const void* src, std::size_t count, dtype t) {
  if (count != 0 && dst != src) m.copy(dst, src, count * dtype_size(t));
}

template <class M>
void finish_avg(M&& m, void* data, std::size_t count, const reduce_args& a, int p) {
  if (a.op == reduce_op::avg && count != 0) {
    m.divide(data, data, count, a.type, static_cast<std::size_t>(p));
  }
}

// A block of a buffer cut into segments of `seg` elements, the last one shorter: the unit in
// which the algorithms pipeline. Offsets are in elements from the start of the buffer; a block
// given only by its length starts there.
class segments {
 public:
  segments(block c, std::size_t seg) noexcept : c_(c), seg_(seg) {}
  segments(std::size_t count, std::size_t seg) noexcept : c_{0, count}, seg_(seg) {}

  std::size_t count() const noexcept { return segments_of(c_.count, seg_); }
  std::size_t offset(std::size_t k) const noexcept { return c_.begin + k * seg_; }
  std::size_t length(std::size_t k) const noexcept { return std::min(seg_, c_.count - k * seg_); }

 private:
  block c_;
  std::size_t seg_;
};

// Posts the send of segment k of `s` (elements of `es` bytes in `base`) to `peer`, appending its
// request to `reqs`.
template <class B>
void post_send(B& b, std::vector<typename B::request>& reqs, const void* base, const segments& s,
               std::size_t k, std::size_t es, int peer, tag_t tag) {
  reqs.push_back(b.isend(bytes_at(base, s.offset(k), es), s.length(k) * es, peer, tag));
}

// Posts the receive of segment k of `s` into `base` from `peer`, appending its request to `reqs`.
template <class B>
void post_recv(B& b, std::vector<typename B::request>& reqs, void* base, const segments& s,
               std::size_t k, std::size_t es, int peer, tag_t tag) {
  reqs.push_back(b.irecv(bytes_at(base, s.offset(k), es), s.length(k) * es, peer, tag));
}

// Posts one send per segment of `s`, in order.
template <class B>
void post_sends(B& b, std::vector<typename B::request>& reqs, const void* base, const segments& s,
                std::size_t es, int peer, tag_t tag) {
  const std::size_t n = s.count();
  for (std::size_t k = 0; k < n; ++k) post_send(b, reqs, base, s, k, es, peer, tag);
}

// Posts one receive per segment of `s`, in order.
template <class B>
void post_recvs(B& b, std::vector<typename B::request>& reqs, void* base, const segments& s,
                std::size_t es, int peer, tag_t tag) {
  const std::size_t n = s.count();
  for (std::size_t k = 0; k < n; ++k) post_recv(b, reqs, base, s, k, es, peer, tag);
}

}  // namespace distcomm::strategy::detail
