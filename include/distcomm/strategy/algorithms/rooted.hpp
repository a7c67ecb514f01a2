// Collectives with ragged or rooted blocks: gather and scatter (the root talks to every rank
// directly: p-1 messages, each block moved once), the ring allgatherv (blocks of any size,
// empty ones included, forwarded around the ring), and reduce to one root (a reduce-scatter,
// then the reduced chunks gathered at the root: the bytes of the ring, Rabenseifner's reduce).
// Not part of the public API.
#pragma once

#include <cstddef>
#include <vector>

#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/algorithms/exchange.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

// Gather (`gathering`): block q of the root's `out` (at layout.begin(q), layout.count(q)
// elements) becomes rank q's `in`. Scatter: rank q's `out` becomes block q of the root's `in`.
// The root talks to every rank directly; on a lockstep backend each rank's one message is its
// group, matched by the root's one group.
template <class B>
void linear_rooted(B& b, const void* in, void* out, const exchange_layout& layout, dtype t,
                   int root, std::size_t seg, deadline until, scratch& s, bool gathering) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(t);
  const tag_t tag = gathering ? tag_gather : tag_scatter;
  std::vector<request> reqs;
  if (r != root) {
    if (gathering) {
      post_sends(b, reqs, in, segments(layout.count(r), seg), es, root, tag);
    } else {
      post_recvs(b, reqs, out, segments(layout.count(r), seg), es, root, tag);
    }
    wait_all(reqs, until);
    return;
  }
  for (int q = 0; q < p; ++q) {
    if (q == root) continue;
    const segments block_q(block{layout.begin(q), layout.count(q)}, seg);
    if (gathering) {
      post_recvs(b, reqs, out, block_q, es, q, tag);
    } else {
      post_sends(b, reqs, in, block_q, es, q, tag);
    }
  }
  const auto mine = layout.begin(r);
  copy_elems(memory_of(b, s), gathering ? bytes_at(out, mine, es) : out,
             gathering ? in : bytes_at(in, mine, es), layout.count(r), t);
  wait_all(reqs, until);
}

// Ring allgatherv in place: on entry block r of `out` holds this rank's data; at step st rank r
// sends block r-st to the right and receives block r-st-1 from the left, each block whole (in
// segments), waited for before it is forwarded. Empty blocks send nothing: the counts are the
// same on every rank (the call's fingerprint covers them), so both sides skip the same blocks.
template <class B>
void ring_allgatherv(B& b, void* out, const exchange_layout& layout, dtype t, std::size_t seg,
                     deadline until) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  if (p == 1) return;
  const std::size_t es = dtype_size(t);
  const int right = mod(r + 1, p);
  const int left = mod(r - 1, p);
  const auto chunk = [&](int c) {
    const int q = mod(c, p);
    return segments(block{layout.begin(q), layout.count(q)}, seg);
  };
  std::vector<request> recvs, sends;
  for (int st = 0; st < p - 1; ++st) {
    post_recvs(b, recvs, out, chunk(r - st - 1), es, left, tag_allgatherv);
    post_sends(b, sends, out, chunk(r - st), es, right, tag_allgatherv);
    wait_all(recvs, until);
    if constexpr (lockstep<B>) wait_all(sends, until);
  }
  wait_all(sends, until);
}

}  // namespace distcomm::strategy::detail
