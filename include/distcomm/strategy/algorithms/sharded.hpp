// The sharded family: each shard of the buffer is reduced by one rank alone, in rank order (fold),
// from the other ranks' copies sent to it directly. The ordered reduce-scatter of deterministic
// mode and the parameter server (which also sends each reduced shard back) share the receiving
// half (gather_fold) and the lockstep form (shards_lockstep). Not part of the public API.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "distcomm/core/partition.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

// Receives `count` elements from every other rank (with `tag`, segment by segment, two slots per
// peer so segment k+2 lands while k is folded), folds them with this rank's `own` in rank order
// into `dst`, finishes avg, and calls done(segment, elements) after each segment. The receiving
// half of both the ordered reduce-scatter and a parameter server.
template <class B, class Done>
void gather_fold(B& b, const void* own, void* dst, std::size_t count, tag_t tag,
                 const reduce_args& a, scratch& s, Done&& done) {
  using request = typename B::request;
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  const auto pp = static_cast<std::size_t>(p);
  const std::size_t slot_bytes = a.seg * es;
  unsigned char* slots = m.scratch(2 * pp * slot_bytes + 1);
  const auto slot = [&](std::size_t k, int q) {
    return slots + ((k % 2) * pp + static_cast<std::size_t>(q)) * slot_bytes;
  };
  const segments segs(count, a.seg);
  const std::size_t nseg = segs.count();
  std::vector<request> recvs[2];
  const auto post = [&](std::size_t k) {
    for (int q = 0; q < p; ++q) {
      if (q != r) recvs[k % 2].push_back(b.irecv(slot(k, q), segs.length(k) * es, q, tag));
    }
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, nseg); ++k) post(k);
  std::vector<const void*> inputs(pp);
  for (std::size_t k = 0; k < nseg; ++k) {
    const std::size_t n = segs.length(k);
    wait_all(recvs[k % 2], a.until);
    for (int q = 0; q < p; ++q) {
      inputs[static_cast<std::size_t>(q)] =
          q == r ? static_cast<const void*>(bytes_at(own, segs.offset(k), es)) : slot(k, q);
    }
    unsigned char* out = bytes_at(dst, segs.offset(k), es);
    m.fold(out, inputs.data(), pp, n, a.type, a.op);
    finish_avg(m, out, n, a, p);
    if (k + 2 < nseg) post(k + 2);
    done(out, n);
  }
}

// The lockstep form of the ordered reduce-scatter and of the parameter server. Shard j of `in`
// (partition(count, servers, j)) is reduced by rank j. Round i sends segment i of every shard to
// its server and receives segment i of this rank's shard from every rank; when `out` is given
// (the parameter server), it also sends segment i-1 of the reduced shard back to every rank and
// receives segment i-1 of every other shard into `out`. A round is one group: everything it
// receives was sent by the peers' groups of the same round from data complete before that round,
// so round i completes once every rank finished round i-1 (induction on i). Per pair of ranks the
// results are posted before the pushes on both sides, the order in which NCCL (which has no tags)
// matches them. The own shard is folded in rank order into `own` (nullptr on a rank that serves
// none) and finished for avg.
template <class B>
void shards_lockstep(B& b, const void* in, void* own, void* out, std::size_t count, int servers,
                     tag_t push_tag, const reduce_args& a, scratch& s) {
  using request = typename B::request;
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  const auto pp = static_cast<std::size_t>(p);
  const auto shard = [&](int j) {
    return partition(count, static_cast<std::size_t>(servers), static_cast<std::size_t>(j));
  };
  const bool serves = r < servers;
  const block mine = serves ? shard(r) : block{};
  const segments own_segs(mine.count, a.seg);  // in `own`
  const std::size_t own_segments = own_segs.count();
  const std::size_t rounds = segments(shard(0), a.seg).count();  // shard 0 is the largest
  const std::size_t slot_bytes = a.seg * es;
  unsigned char* slots = serves ? m.scratch(pp * slot_bytes + 1) : nullptr;
  std::vector<const void*> inputs(pp);
  std::vector<request> requests;
  for (std::size_t i = 0; i <= rounds; ++i) {
    if (out != nullptr && i > 0) {
      const std::size_t prev = i - 1;
      if (serves && prev < own_segments) {
        for (int q = 0; q < p; ++q) {
          if (q != r) post_send(b, requests, own, own_segs, prev, es, q, tag_ps_pull);
        }
      }
      for (int j = 0; j < servers; ++j) {
        const segments c(shard(j), a.seg);
        if (j != r && prev < c.count()) post_recv(b, requests, out, c, prev, es, j, tag_ps_pull);
      }
    }
    if (i < rounds) {
      for (int j = 0; j < servers; ++j) {
        const segments c(shard(j), a.seg);
        if (j != r && i < c.count()) post_send(b, requests, in, c, i, es, j, push_tag);
      }
      if (i < own_segments) {
        for (int q = 0; q < p; ++q) {
          if (q != r) {
            requests.push_back(b.irecv(slots + static_cast<std::size_t>(q) * slot_bytes,
                                       own_segs.length(i) * es, q, push_tag));
          }
        }
      }
    }
    wait_all(requests, a.until);
    if (i < own_segments) {
      for (int q = 0; q < p; ++q) {
        inputs[static_cast<std::size_t>(q)] =
            q == r ? static_cast<const void*>(bytes_at(in, mine.begin + own_segs.offset(i), es))
                   : slots + static_cast<std::size_t>(q) * slot_bytes;
      }
      unsigned char* dst = bytes_at(own, own_segs.offset(i), es);
      const std::size_t n = own_segs.length(i);
      m.fold(dst, inputs.data(), pp, n, a.type, a.op);
      finish_avg(m, dst, n, a, p);
    }
  }
}

// Reduce-scatter in which chunk r is reduced by rank r alone, in rank order (fold), from the
// other ranks' chunks sent to it directly. Same bytes moved as the ring; p-1 peers per rank.
// This is the reduction of deterministic mode: every strategy produces the same bits with it.
template <class B>
void ordered_reduce_scatter(B& b, const void* in, void* owned, std::size_t count,
                            const reduce_args& a, scratch& s) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  const auto pp = static_cast<std::size_t>(p);
  const block mine = partition(count, pp, static_cast<std::size_t>(r));
  if (p == 1) {
    copy_elems(memory_of(b, s), owned, in, count, a.type);
    return;
  }
  if constexpr (lockstep<B>) {
    return shards_lockstep(b, in, owned, nullptr, count, p, tag_ordered, a, s);
  }
  std::vector<request> sends;
  for (int d = 1; d < p; ++d) {
    const int q = mod(r + d, p);
    post_sends(b, sends, in, segments(partition(count, pp, static_cast<std::size_t>(q)), a.seg), es,
               q, tag_ordered);
  }
  gather_fold(b, bytes_at(in, mine.begin, es), owned, mine.count, tag_ordered, a, s,
              [](const unsigned char*, std::size_t) {});
  wait_all(sends, a.until);
}

// Parameter server with `k` server ranks (0 .. k-1): server j owns shard j (partition(count, k,
// j)), receives that shard from every rank, reduces in rank order (fold) and sends the result
// back. k = 1 is the classic single parameter server; k = p is fully sharded.
template <class B>
void ps_allreduce(B& b, const void* in, void* out, std::size_t count, int k, const reduce_args& a,
                  scratch& s) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  if (p == 1) {
    copy_elems(memory_of(b, s), out, in, count, a.type);
    return;
  }
  const auto shard = [&](int j) {
    return partition(count, static_cast<std::size_t>(k), static_cast<std::size_t>(j));
  };
  if constexpr (lockstep<B>) {
    void* own = r < k ? static_cast<void*>(bytes_at(out, shard(r).begin, es)) : nullptr;
    return shards_lockstep(b, in, own, out, count, k, tag_ps_push, a, s);
  }

  // 1. Push every shard this rank does not serve to its server. Posted before any wait, so no
  //    server can be left waiting on a push that was never sent.
  std::vector<request> pushes;
  for (int j = 0; j < k; ++j) {
    if (j != r) post_sends(b, pushes, in, segments(shard(j), a.seg), es, j, tag_ps_push);
  }
  // 2. Serve: reduce the own shard segment by segment and send each result back at once.
  std::vector<request> results;
  if (r < k) {
    const block c = shard(r);
    gather_fold(b, bytes_at(in, c.begin, es), bytes_at(out, c.begin, es), c.count, tag_ps_push, a,
                s, [&](const unsigned char* seg, std::size_t n) {
                  for (int q = 0; q < p; ++q) {
                    if (q != r) results.push_back(b.isend(seg, n * es, q, tag_ps_pull));
                  }
                });
  }
  // 3. Pull the reduced shards. A segment's result is received only after its push completed,
  //    since in place the two share a buffer.
  std::vector<request> pulls;
  std::size_t pushed = 0;
  for (int j = 0; j < k; ++j) {
    if (j == r) continue;
    const segments c(shard(j), a.seg);
    for (std::size_t m = 0; m < c.count(); ++m) {
      pushes[pushed++].wait(a.until);
      post_recv(b, pulls, out, c, m, es, j, tag_ps_pull);
    }
  }
  pushes.clear();
  wait_all(pulls, a.until);
  wait_all(results, a.until);
}

}  // namespace distcomm::strategy::detail
