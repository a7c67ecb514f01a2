// The ring family: a segmented, pipelined ring reduce-scatter and a ring allgather, each rank
// talking only to its two neighbours. strategy::ring is the one followed by the other; the
// reduce-scatter and allgather collectives of every point-to-point strategy use them too.
// Not part of the public API.
#pragma once

#include <cstddef>
#include <vector>

#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

// Ring reduce-scatter over the `count` elements of `in`, split by partition(count, p, .). Rank r
// ends with the fully reduced chunk r in `owned`. Segmented and pipelined: a segment is forwarded
// to the right neighbour as soon as it is reduced, while later segments are still arriving.
// At step s rank r sends chunk r-s-1 and receives chunk r-s-2, so the last chunk it reduces is r.
// Lockstep needs no variant: a step's receives are all waited on before anything of the next step
// is, so the group issued at a step's first wait holds exactly that step's receives from the left
// and the sends to the right posted during the previous step, which the right neighbour's group
// of the same step receives.
template <class B>
void ring_reduce_scatter(B& b, const void* in, void* owned, std::size_t count, const reduce_args& a,
                         scratch& s) {
  using request = typename B::request;
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  const auto pp = static_cast<std::size_t>(p);
  if (p == 1) {
    copy_elems(m, owned, in, count, a.type);
    return;
  }
  const int right = mod(r + 1, p);
  const int left = mod(r - 1, p);
  const std::size_t max_chunk = partition(count, pp, 0).count;
  unsigned char* buf[2];
  buf[0] = m.scratch(2 * max_chunk * es + 1);
  buf[1] = buf[0] + max_chunk * es;
  const auto chunk = [&](int c) {
    return partition(count, pp, static_cast<std::size_t>(mod(c, p)));
  };

  // A chunk is received into buf (from its start), combined with its place in `in`.
  std::vector<request> recvs, next_recvs, sends, next_sends;
  post_recvs(b, recvs, buf[0], segments(chunk(r - 2).count, a.seg), es, left,
             tag_ring_reduce_scatter);
  post_sends(b, sends, in, segments(chunk(r - 1), a.seg), es, right, tag_ring_reduce_scatter);
  const int steps = p - 1;
  for (int st = 0; st < steps; ++st) {
    const bool last = st == steps - 1;
    const segments c(chunk(r - st - 2), a.seg);                                 // in `in`
    const segments nc(last ? std::size_t{0} : chunk(r - st - 3).count, a.seg);  // in nb
    unsigned char* rb = buf[st % 2];
    unsigned char* nb = buf[(st + 1) % 2];
    const std::size_t n_this = c.count();
    const std::size_t n_next = nc.count();
    // The next step receives into nb, which this step's sends (posted one step earlier) may
    // still be reading: wait for the send of the same segment first.
    const auto post_next_recv = [&](std::size_t k) {
      if (k < sends.size()) sends[k].wait(a.until);
      post_recv(b, next_recvs, nb, nc, k, es, left, tag_ring_reduce_scatter);
    };
    for (std::size_t k = 0; k < n_this; ++k) {
      const std::size_t n = c.length(k);
      recvs[k].wait(a.until);
      unsigned char* rk = bytes_at(rb, k * a.seg, es);
      unsigned char* acc = last ? bytes_at(owned, k * a.seg, es) : rk;
      m.combine(acc, bytes_at(in, c.offset(k), es), rk, n, a.type, a.op);
      if (last) {
        finish_avg(m, acc, n, a, p);
        continue;
      }
      next_sends.push_back(b.isend(acc, n * es, right, tag_ring_reduce_scatter));
      if (k < n_next) post_next_recv(k);
    }
    for (std::size_t k = n_this; k < n_next; ++k) post_next_recv(k);
    wait_all(sends, a.until);
    recvs.clear();
    sends.swap(next_sends);
    recvs.swap(next_recvs);
  }
  wait_all(sends, a.until);
}

// Ring allgather in place: on entry chunk r of `out` (partition(count, p, r)) holds this rank's
// block; on return every chunk does. All receives target distinct chunks, so they are posted up
// front and each segment is forwarded as soon as it lands.
template <class B>
void ring_allgather(B& b, void* out, std::size_t count, dtype t, std::size_t seg, deadline until) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  if (p == 1) return;
  const std::size_t es = dtype_size(t);
  const auto pp = static_cast<std::size_t>(p);
  const int right = mod(r + 1, p);
  const int left = mod(r - 1, p);
  const auto chunk = [&](int c) {
    return segments(partition(count, pp, static_cast<std::size_t>(mod(c, p))), seg);
  };

  std::vector<request> recvs, sends;
  if constexpr (lockstep<B>) {
    // Posting every receive up front would put them all in the first group, which then waits for
    // the left neighbour to forward chunks it can only forward once its own first group (waiting
    // the same way) completed: a cycle around the ring. Step by step instead: receive chunk
    // r-st-1 from the left while sending chunk r-st (received at the step before) to the right.
    for (int st = 0; st < p - 1; ++st) {
      post_recvs(b, recvs, out, chunk(r - st - 1), es, left, tag_ring_allgather);
      post_sends(b, sends, out, chunk(r - st), es, right, tag_ring_allgather);
      wait_all(recvs, until);
      wait_all(sends, until);
    }
    return;
  }
  for (int st = 0; st < p - 1; ++st) {
    post_recvs(b, recvs, out, chunk(r - st - 1), es, left, tag_ring_allgather);
  }
  post_sends(b, sends, out, chunk(r), es, right, tag_ring_allgather);
  std::size_t next = 0;  // index into recvs
  for (int st = 0; st < p - 1; ++st) {
    const segments c = chunk(r - st - 1);
    const bool forward = st < p - 2;  // the last chunk received has gone all the way round
    for (std::size_t k = 0; k < c.count(); ++k) {
      recvs[next++].wait(until);
      if (forward) post_send(b, sends, out, c, k, es, right, tag_ring_allgather);
    }
  }
  recvs.clear();
  wait_all(sends, until);
}

}  // namespace distcomm::strategy::detail
