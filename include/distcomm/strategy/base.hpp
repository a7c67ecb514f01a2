// p2p_base: what every point-to-point strategy shares: configuration, scratch space, and the
// collectives other than allreduce (ring reduce-scatter and allgather, tree broadcast,
// dissemination barrier, pairwise or Bruck alltoall, ring allgatherv, linear gather and scatter,
// reduce as reduce-scatter then gather). A strategy derives from it and adds allreduce. Every
// collective ends with finish(), so that on a device-memory backend the work it enqueued is
// complete when it returns, as after the backend's native collectives.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/algorithms/barrier.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/algorithms/exchange.hpp"
#include "distcomm/strategy/algorithms/ring.hpp"
#include "distcomm/strategy/algorithms/rooted.hpp"
#include "distcomm/strategy/algorithms/sharded.hpp"
#include "distcomm/strategy/algorithms/tree.hpp"

namespace distcomm::strategy {

class p2p_base {
 public:
  // Every write into a caller's buffer goes through the memory operations policy, so a call may
  // agree while its first messages travel (check/gate.hpp).
  static constexpr bool overlaps_agreement = true;

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

  // Block q of `in` (block_count elements) goes to rank q; block q of `out` comes from rank q.
  // Bruck for small blocks on a host backend, else pairwise.
  template <class B>
  void alltoall(B& b, const void* in, void* out, std::size_t block_count, dtype t, deadline until) {
    if constexpr (!detail::moves_device_memory<B>::value) {
      if (b.size() > 2 && block_count * dtype_size(t) <= bruck_max_block_bytes) {
        return detail::bruck_alltoall(b, in, out, block_count, t, until, scratch_);
      }
    }
    const detail::exchange_layout even{nullptr, nullptr, block_count};
    detail::pairwise_alltoall(b, in, even, out, even, t, bounded_seg(t, block_count), until,
                              scratch_, false);
    finish(b, until);
  }

  // Per-rank counts and displacements (elements); each pair checks the count it sends against
  // the count the receiver expects first, unless the call check's exchange compared them already
  // (`counts_agreed`, check/carried.hpp).
  template <class B>
  void alltoallv(B& b, const void* in, const std::size_t* send_counts,
                 const std::size_t* send_displs, void* out, const std::size_t* recv_counts,
                 const std::size_t* recv_displs, dtype t, deadline until,
                 bool counts_agreed = false) {
    detail::pairwise_alltoall(b, in, detail::exchange_layout{send_counts, send_displs, 0}, out,
                              detail::exchange_layout{recv_counts, recv_displs, 0}, t,
                              detail::segment_elems(segment_bytes_, t), until, scratch_,
                              !counts_agreed);
    finish(b, until);
  }

  // Block q of `out` (counts[q] elements at displs[q]) becomes rank q's `in`.
  template <class B>
  void allgatherv(B& b, const void* in, void* out, const std::size_t* counts,
                  const std::size_t* displs, dtype t, deadline until) {
    const std::size_t es = dtype_size(t);
    const auto r = static_cast<std::size_t>(b.rank());
    detail::copy_elems(detail::memory_of(b, scratch_), detail::bytes_at(out, displs[r], es), in,
                       counts[r], t);
    detail::ring_allgatherv(b, out, detail::exchange_layout{counts, displs, 0}, t,
                            detail::segment_elems(segment_bytes_, t), until);
    finish(b, until);
  }

  // The root's `out` (count elements per rank, rank order) gathers every rank's `in`.
  template <class B>
  void gather(B& b, const void* in, void* out, std::size_t count, dtype t, int root,
              deadline until) {
    detail::linear_rooted(b, in, out, detail::exchange_layout{nullptr, nullptr, count}, t, root,
                          bounded_seg(t, count), until, scratch_, true);
    finish(b, until);
  }

  // Every rank's `out` (count elements) becomes its block of the root's `in`.
  template <class B>
  void scatter(B& b, const void* in, void* out, std::size_t count, dtype t, int root,
               deadline until) {
    detail::linear_rooted(b, in, out, detail::exchange_layout{nullptr, nullptr, count}, t, root,
                          bounded_seg(t, count), until, scratch_, false);
    finish(b, until);
  }

  // The root's `out` becomes the reduction of every rank's `in`: each rank reduces its chunk
  // (partition(count, p, r)) as in reduce_scatter, in rank order under deterministic mode, and
  // the root gathers the chunks. Host memory (the chunks of the other ranks are staged here).
  template <class B>
  void reduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op, int root,
              deadline until) {
    if constexpr (detail::moves_device_memory<B>::value) {
      throw invalid_argument_error(std::string("reduce: backend '") + B::name +
                                   "' moves device memory; reduce stages chunks on the host: "
                                   "use allreduce");
    } else {
      reduce_on_host(b, in, out, count, t, op, root, until);
    }
  }

  bool deterministic() const noexcept { return deterministic_; }

  // Blocks up to this size go through Bruck's alltoall (ceil(log2 p) rounds), larger ones
  // pairwise (p-1 rounds, each byte sent once). A starting point, not yet measured per backend.
  static constexpr std::size_t bruck_max_block_bytes = 256;

 protected:
  template <class B>
  void reduce_on_host(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                      int root, deadline until) {
    const int p = b.size();
    const auto pp = static_cast<std::size_t>(p);
    const std::size_t es = dtype_size(t);
    const block mine = partition(count, pp, static_cast<std::size_t>(b.rank()));
    void* owned = b.rank() == root ? detail::bytes_at(out, mine.begin, es)
                                   : static_cast<void*>(staging_.get(mine.count * es + 1));
    const auto a = args(t, op, count, until);
    if (deterministic_) {
      detail::ordered_reduce_scatter(b, in, owned, count, a, scratch_);
    } else {
      detail::ring_reduce_scatter(b, in, owned, count, a, scratch_);
    }
    std::vector<std::size_t> counts(pp), displs(pp);
    for (std::size_t q = 0; q < pp; ++q) {
      const block c = partition(count, pp, q);
      counts[q] = c.count;
      displs[q] = c.begin;
    }
    detail::linear_rooted(b, owned, out, detail::exchange_layout{counts.data(), displs.data(), 0},
                          t, root, a.seg, until, scratch_, true);
  }

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
  detail::scratch staging_;  // reduce: this rank's reduced chunk, on ranks other than the root
};

}  // namespace distcomm::strategy
