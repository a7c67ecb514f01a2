// p2p_base: what every point-to-point strategy shares: configuration, scratch space, and the
// collectives other than allreduce (ring reduce-scatter and allgather, tree broadcast,
// dissemination barrier). A strategy derives from it and adds allreduce. Every collective ends
// with finish(), so that on a device-memory backend the work it enqueued is complete when it
// returns, as after the backend's native collectives.
#pragma once

#include <algorithm>
#include <cstddef>

#include "distcomm/config.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/algorithms/barrier.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/algorithms/ring.hpp"
#include "distcomm/strategy/algorithms/sharded.hpp"
#include "distcomm/strategy/algorithms/tree.hpp"

namespace distcomm::strategy {

class p2p_base {
 public:
  explicit p2p_base(const config& c)
      : segment_bytes_(c.segment_bytes.value_or(detail::default_segment_bytes)),
        deterministic_(c.deterministic) {}

  // in: recv_count * size elements; out: recv_count elements, block `rank` of the reduction.
  template <class B>
  void reduce_scatter(B& b, const void* in, void* out, std::size_t recv_count, dtype t,
                      reduce_op op, deadline until) {
    const std::size_t count = recv_count * static_cast<std::size_t>(b.size());
    const auto a = args(t, op, count, until);
    if (deterministic_) {
      detail::ordered_reduce_scatter(b, in, out, count, a, scratch_);
    } else {
      detail::ring_reduce_scatter(b, in, out, count, a, scratch_);
    }
    finish(b, until);
  }

  // in: send_count elements; out: send_count * size elements, rank order.
  template <class B>
  void allgather(B& b, const void* in, void* out, std::size_t send_count, dtype t, deadline until) {
    const std::size_t es = dtype_size(t);
    detail::copy_elems(detail::memory_of(b, scratch_),
                       detail::bytes_at(out, static_cast<std::size_t>(b.rank()) * send_count, es),
                       in, send_count, t);
    detail::ring_allgather(b, out, send_count * static_cast<std::size_t>(b.size()), t,
                           bounded_seg(t, send_count), until);
    finish(b, until);
  }

  template <class B>
  void broadcast(B& b, void* data, std::size_t count, dtype t, int root, deadline until) {
    detail::tree_broadcast(b, data, count, t, root, bounded_seg(t, count), until);
    finish(b, until);
  }

  template <class B>
  void barrier(B& b, deadline until) {
    detail::dissemination_barrier(b, until, scratch_);
  }

  bool deterministic() const noexcept { return deterministic_; }

 protected:
  // Segment in elements, never larger than the message, so scratch stays proportional to what
  // is moved whatever DISTCOMM_SEGMENT_SIZE says.
  std::size_t bounded_seg(dtype t, std::size_t count) const noexcept {
    return std::max<std::size_t>(1, std::min(detail::segment_elems(segment_bytes_, t), count));
  }

  detail::reduce_args args(dtype t, reduce_op op, std::size_t count,
                           deadline until) const noexcept {
    return detail::reduce_args{t, op, bounded_seg(t, count), until};
  }

  // Deterministic allreduce: rank-order reduce-scatter, then ring allgather.
  template <class B>
  void ordered_allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                         deadline until) {
    const auto a = args(t, op, count, until);
    const block mine =
        partition(count, static_cast<std::size_t>(b.size()), static_cast<std::size_t>(b.rank()));
    detail::ordered_reduce_scatter(b, in, detail::bytes_at(out, mine.begin, dtype_size(t)), count,
                                   a, scratch_);
    detail::ring_allgather(b, out, count, t, a.seg, until);
    finish(b, until);
  }

  // Waits for the device work a collective enqueued (nothing on host memory).
  template <class B>
  void finish(B& b, deadline until) {
    detail::memory_of(b, scratch_).complete(until);
  }

  std::size_t segment_bytes_;
  bool deterministic_;
  detail::scratch scratch_;
};

}  // namespace distcomm::strategy
