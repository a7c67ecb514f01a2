// The point-to-point algorithms behind the strategies, written once against the backend contract
// (backend.hpp). Every copy, reduction and scratch allocation goes through the memory operations
// policy of the backend (memory_of in detail.hpp): inline host kernels for host memory, the
// backend's own device operations for device memory. Not part of the public API.
//
// Device-memory backends queue their sends and receives and issue them as one group at the first
// wait (lockstep, detail.hpp). Where posting ahead would put a receive in a group that can only
// complete after a later group of the same or another rank, the algorithm has a lockstep variant;
// each such place says why the other algorithms need none. The argument throughout: if every
// group's sends and receives are matched by groups of the peers that are issued without waiting
// for anything later, then by induction on the group index every group completes.
#pragma once

#include <algorithm>
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
  const auto len = [&](const block& c, std::size_t k) {
    return std::min(a.seg, c.count - k * a.seg);
  };

  std::vector<request> recvs, next_recvs, sends, next_sends;
  const block first_recv = chunk(r - 2);
  for (std::size_t k = 0; k < segments_of(first_recv.count, a.seg); ++k) {
    recvs.push_back(
        b.irecv(buf[0] + k * a.seg * es, len(first_recv, k) * es, left, tag_ring_reduce_scatter));
  }
  const block first_send = chunk(r - 1);
  for (std::size_t k = 0; k < segments_of(first_send.count, a.seg); ++k) {
    sends.push_back(b.isend(bytes_at(in, first_send.begin + k * a.seg, es), len(first_send, k) * es,
                            right, tag_ring_reduce_scatter));
  }
  const int steps = p - 1;
  for (int st = 0; st < steps; ++st) {
    const bool last = st == steps - 1;
    const block c = chunk(r - st - 2);
    const block nc = last ? block{} : chunk(r - st - 3);
    unsigned char* rb = buf[st % 2];
    unsigned char* nb = buf[(st + 1) % 2];
    const std::size_t n_this = segments_of(c.count, a.seg);
    const std::size_t n_next = segments_of(nc.count, a.seg);
    // The next step receives into nb, which this step's sends (posted one step earlier) may
    // still be reading: wait for the send of the same segment first.
    const auto post_next_recv = [&](std::size_t k) {
      if (k < sends.size()) sends[k].wait(a.until);
      next_recvs.push_back(
          b.irecv(nb + k * a.seg * es, len(nc, k) * es, left, tag_ring_reduce_scatter));
    };
    for (std::size_t k = 0; k < n_this; ++k) {
      const std::size_t n = len(c, k);
      recvs[k].wait(a.until);
      unsigned char* acc = last ? bytes_at(owned, k * a.seg, es) : rb + k * a.seg * es;
      m.combine(acc, bytes_at(in, c.begin + k * a.seg, es), rb + k * a.seg * es, n, a.type, a.op);
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
    return partition(count, pp, static_cast<std::size_t>(mod(c, p)));
  };
  const auto len = [&](const block& c, std::size_t k) { return std::min(seg, c.count - k * seg); };

  std::vector<request> recvs, sends;
  if constexpr (lockstep<B>) {
    // Posting every receive up front would put them all in the first group, which then waits for
    // the left neighbour to forward chunks it can only forward once its own first group (waiting
    // the same way) completed: a cycle around the ring. Step by step instead: receive chunk
    // r-st-1 from the left while sending chunk r-st (received at the step before) to the right.
    for (int st = 0; st < p - 1; ++st) {
      const block rc = chunk(r - st - 1);
      const block sc = chunk(r - st);
      for (std::size_t k = 0; k < segments_of(rc.count, seg); ++k) {
        recvs.push_back(b.irecv(bytes_at(out, rc.begin + k * seg, es), len(rc, k) * es, left,
                                tag_ring_allgather));
      }
      for (std::size_t k = 0; k < segments_of(sc.count, seg); ++k) {
        sends.push_back(b.isend(bytes_at(out, sc.begin + k * seg, es), len(sc, k) * es, right,
                                tag_ring_allgather));
      }
      wait_all(recvs, until);
      wait_all(sends, until);
    }
    return;
  }
  for (int st = 0; st < p - 1; ++st) {
    const block c = chunk(r - st - 1);
    for (std::size_t k = 0; k < segments_of(c.count, seg); ++k) {
      recvs.push_back(
          b.irecv(bytes_at(out, c.begin + k * seg, es), len(c, k) * es, left, tag_ring_allgather));
    }
  }
  const block own = chunk(r);
  for (std::size_t k = 0; k < segments_of(own.count, seg); ++k) {
    sends.push_back(b.isend(bytes_at(out, own.begin + k * seg, es), len(own, k) * es, right,
                            tag_ring_allgather));
  }
  std::size_t next = 0;  // index into recvs
  for (int st = 0; st < p - 1; ++st) {
    const block c = chunk(r - st - 1);
    const bool forward = st < p - 2;  // the last chunk received has gone all the way round
    for (std::size_t k = 0; k < segments_of(c.count, seg); ++k) {
      recvs[next++].wait(until);
      if (forward) {
        sends.push_back(b.isend(bytes_at(out, c.begin + k * seg, es), len(c, k) * es, right,
                                tag_ring_allgather));
      }
    }
  }
  recvs.clear();
  wait_all(sends, until);
}

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
  const auto len = [&](std::size_t k) { return std::min(a.seg, count - k * a.seg); };
  const std::size_t nseg = segments_of(count, a.seg);
  std::vector<request> recvs[2];
  const auto post = [&](std::size_t k) {
    for (int q = 0; q < p; ++q) {
      if (q != r) recvs[k % 2].push_back(b.irecv(slot(k, q), len(k) * es, q, tag));
    }
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, nseg); ++k) post(k);
  std::vector<const void*> inputs(pp);
  for (std::size_t k = 0; k < nseg; ++k) {
    const std::size_t n = len(k);
    wait_all(recvs[k % 2], a.until);
    for (int q = 0; q < p; ++q) {
      inputs[static_cast<std::size_t>(q)] =
          q == r ? static_cast<const void*>(bytes_at(own, k * a.seg, es)) : slot(k, q);
    }
    unsigned char* out = bytes_at(dst, k * a.seg, es);
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
  const auto len = [&](const block& c, std::size_t i) {
    return std::min(a.seg, c.count - i * a.seg);
  };
  const bool serves = r < servers;
  const block mine = serves ? shard(r) : block{};
  const std::size_t own_segments = segments_of(mine.count, a.seg);
  const std::size_t rounds = segments_of(shard(0).count, a.seg);  // shard 0 is the largest
  const std::size_t slot_bytes = a.seg * es;
  unsigned char* slots = serves ? m.scratch(pp * slot_bytes + 1) : nullptr;
  std::vector<const void*> inputs(pp);
  std::vector<request> requests;
  for (std::size_t i = 0; i <= rounds; ++i) {
    if (out != nullptr && i > 0) {
      const std::size_t prev = i - 1;
      if (serves && prev < own_segments) {
        for (int q = 0; q < p; ++q) {
          if (q != r) {
            requests.push_back(
                b.isend(bytes_at(own, prev * a.seg, es), len(mine, prev) * es, q, tag_ps_pull));
          }
        }
      }
      for (int j = 0; j < servers; ++j) {
        const block c = shard(j);
        if (j != r && prev < segments_of(c.count, a.seg)) {
          requests.push_back(b.irecv(bytes_at(out, c.begin + prev * a.seg, es), len(c, prev) * es,
                                     j, tag_ps_pull));
        }
      }
    }
    if (i < rounds) {
      for (int j = 0; j < servers; ++j) {
        const block c = shard(j);
        if (j != r && i < segments_of(c.count, a.seg)) {
          requests.push_back(
              b.isend(bytes_at(in, c.begin + i * a.seg, es), len(c, i) * es, j, push_tag));
        }
      }
      if (i < own_segments) {
        for (int q = 0; q < p; ++q) {
          if (q != r) {
            requests.push_back(b.irecv(slots + static_cast<std::size_t>(q) * slot_bytes,
                                       len(mine, i) * es, q, push_tag));
          }
        }
      }
    }
    wait_all(requests, a.until);
    if (i < own_segments) {
      for (int q = 0; q < p; ++q) {
        inputs[static_cast<std::size_t>(q)] =
            q == r ? static_cast<const void*>(bytes_at(in, mine.begin + i * a.seg, es))
                   : slots + static_cast<std::size_t>(q) * slot_bytes;
      }
      unsigned char* dst = bytes_at(own, i * a.seg, es);
      const std::size_t n = len(mine, i);
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
  const auto len = [&](const block& c, std::size_t k) {
    return std::min(a.seg, c.count - k * a.seg);
  };
  std::vector<request> sends;
  for (int d = 1; d < p; ++d) {
    const int q = mod(r + d, p);
    const block c = partition(count, pp, static_cast<std::size_t>(q));
    for (std::size_t k = 0; k < segments_of(c.count, a.seg); ++k) {
      sends.push_back(
          b.isend(bytes_at(in, c.begin + k * a.seg, es), len(c, k) * es, q, tag_ordered));
    }
  }
  gather_fold(b, bytes_at(in, mine.begin, es), owned, mine.count, tag_ordered, a, s,
              [](const unsigned char*, std::size_t) {});
  wait_all(sends, a.until);
}

// Pipelined binary tree: segments are reduced up to rank 0 (each node combines its own data with
// its children's, in that order), then broadcast down. Rank 0's result is copied to everyone, so
// all ranks hold the same bits.
// Lockstep needs no variant. Going up, data only flows towards the root: the group a node issues
// while waiting for segment k holds sends of segments before k, whose receives the parent posted
// two segments ahead and issues no later than its own wait for them, which needs nothing the node
// has not already sent. A leaf's single group of sends completes as its parent's groups drain it
// in order. Going down, a node's receives form one group filled by its parent's sends, which its
// parent posts once its own receives completed: store and forward per level, no cycle.
template <class B>
void tree_allreduce(B& b, const void* in, void* out, std::size_t count, const reduce_args& a,
                    scratch& s) {
  using request = typename B::request;
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(a.type);
  if (p == 1 || count == 0) {
    copy_elems(m, out, in, count, a.type);
    return;
  }
  const int parent = (r - 1) / 2;
  int kids[2];
  int nk = 0;
  for (int c = 2 * r + 1; c <= 2 * r + 2; ++c) {
    if (c < p) kids[nk++] = c;
  }
  const std::size_t nseg = segments_of(count, a.seg);
  const auto len = [&](std::size_t k) { return std::min(a.seg, count - k * a.seg); };
  const std::size_t slot_bytes = a.seg * es;
  unsigned char* slots = m.scratch(4 * slot_bytes + 1);
  const auto slot = [&](std::size_t k, int i) {
    return slots + ((k % 2) * 2 + static_cast<std::size_t>(i)) * slot_bytes;
  };
  std::vector<request> recvs[2];
  const auto post = [&](std::size_t k) {
    for (int i = 0; i < nk; ++i) {
      recvs[k % 2].push_back(b.irecv(slot(k, i), len(k) * es, kids[i], tag_tree_up));
    }
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, nseg); ++k) post(k);

  std::vector<request> sends;
  for (std::size_t k = 0; k < nseg; ++k) {
    const std::size_t n = len(k);
    const unsigned char* src = bytes_at(in, k * a.seg, es);
    unsigned char* dst = bytes_at(out, k * a.seg, es);
    if (nk == 0) {  // a leaf forwards its input untouched
      sends.push_back(b.isend(src, n * es, parent, tag_tree_up));
      continue;
    }
    recvs[k % 2][0].wait(a.until);
    m.combine(dst, src, slot(k, 0), n, a.type, a.op);
    if (nk == 2) {
      recvs[k % 2][1].wait(a.until);
      m.combine(dst, dst, slot(k, 1), n, a.type, a.op);
    }
    recvs[k % 2].clear();
    if (k + 2 < nseg) post(k + 2);
    if (r == 0) {
      finish_avg(m, dst, n, a, p);
    } else {
      sends.push_back(b.isend(dst, n * es, parent, tag_tree_up));
    }
  }
  wait_all(sends, a.until);  // the buffers we sent up are about to be overwritten

  std::vector<request> down;
  if (r != 0) {
    for (std::size_t k = 0; k < nseg; ++k) {
      down.push_back(b.irecv(bytes_at(out, k * a.seg, es), len(k) * es, parent, tag_tree_down));
    }
  }
  for (std::size_t k = 0; k < nseg; ++k) {
    if (r != 0) down[k].wait(a.until);
    for (int i = 0; i < nk; ++i) {
      sends.push_back(b.isend(bytes_at(out, k * a.seg, es), len(k) * es, kids[i], tag_tree_down));
    }
  }
  down.clear();
  wait_all(sends, a.until);
}

// Recursive doubling (Thakur, Rabenseifner and Gropp, 2005): log2(p) rounds in which partners
// exchange the whole buffer and both combine it, the lower rank's operand first, so every rank
// computes the same bits. One message latency per round where the ring needs 2(p-1): the choice
// for small buffers, whose n·log2(p) bytes cost nothing next to the latencies. With p not a power
// of two, ranks fold in first: of the first 2(p-p') ranks (p' the largest power of two <= p) each
// even one hands its buffer to the odd one above it, which combines and takes part, and receives
// the result at the end. In lockstep every step is one group per rank, matched by the partner's
// same step, and the folded-in rank's two steps wait for its partner's first and last.
template <class B>
void recursive_doubling_allreduce(B& b, const void* in, void* out, std::size_t count,
                                  const reduce_args& a, scratch& s) {
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t bytes = count * dtype_size(a.type);
  if (p == 1 || count == 0) {
    copy_elems(m, out, in, count, a.type);
    return;
  }
  int pof2 = 1;
  while (pof2 <= p / 2) pof2 *= 2;
  const int rem = p - pof2;
  if (r < 2 * rem && r % 2 == 0) {
    // The send completes before the result can arrive (rank r + 1 needs all of it first), so
    // `in` may be `out`.
    b.isend(in, bytes, r + 1, tag_recursive_doubling).wait(a.until);
    b.irecv(out, bytes, r + 1, tag_recursive_doubling).wait(a.until);
    return;
  }
  unsigned char* tmp = m.scratch(bytes);
  copy_elems(m, out, in, count, a.type);
  int vr = r - rem;  // rank among the p' that take part
  if (r < 2 * rem) {
    b.irecv(tmp, bytes, r - 1, tag_recursive_doubling).wait(a.until);
    m.combine(out, tmp, out, count, a.type, a.op);  // rank r - 1's operand first
    vr = r / 2;
  }
  // Participant v is rank 2v + 1 when it took a partner in, else v + rem: increasing in v, so the
  // lower participant is the lower rank.
  const auto rank_of = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vpeer = vr ^ mask;
    const int peer = rank_of(vpeer);
    auto recv = b.irecv(tmp, bytes, peer, tag_recursive_doubling);
    auto send = b.isend(out, bytes, peer, tag_recursive_doubling);
    recv.wait(a.until);
    send.wait(a.until);  // `out` is overwritten next
    if (vpeer < vr) {
      m.combine(out, tmp, out, count, a.type, a.op);
    } else {
      m.combine(out, out, tmp, count, a.type, a.op);
    }
  }
  finish_avg(m, out, count, a, p);
  if (r < 2 * rem) b.isend(out, bytes, r - 1, tag_recursive_doubling).wait(a.until);
}

// Pipelined binary-tree broadcast from `root` (ranks renumbered so the root is 0). In lockstep a
// node's receives form one group, filled by the parent's sends: store and forward per level.
template <class B>
void tree_broadcast(B& b, void* data, std::size_t count, dtype t, int root, std::size_t seg,
                    deadline until) {
  using request = typename B::request;
  const int p = b.size();
  if (p == 1 || count == 0) return;
  const std::size_t es = dtype_size(t);
  const int vr = mod(b.rank() - root, p);
  const int parent = mod((vr - 1) / 2 + root, p);
  const std::size_t nseg = segments_of(count, seg);
  const auto len = [&](std::size_t k) { return std::min(seg, count - k * seg); };
  std::vector<request> recvs, sends;
  if (vr != 0) {
    for (std::size_t k = 0; k < nseg; ++k) {
      recvs.push_back(b.irecv(bytes_at(data, k * seg, es), len(k) * es, parent, tag_broadcast));
    }
  }
  for (std::size_t k = 0; k < nseg; ++k) {
    if (vr != 0) recvs[k].wait(until);
    for (int c = 2 * vr + 1; c <= 2 * vr + 2 && c < p; ++c) {
      sends.push_back(
          b.isend(bytes_at(data, k * seg, es), len(k) * es, mod(c + root, p), tag_broadcast));
    }
  }
  recvs.clear();
  wait_all(sends, until);
}

// Dissemination barrier: ceil(log2 p) rounds of one tiny message each way. Each round is one
// group in lockstep, matched by the same round on the two peers.
template <class B>
void dissemination_barrier(B& b, deadline until, scratch& s) {
  const int p = b.size();
  const int r = b.rank();
  unsigned char token_out = 1;
  unsigned char token_in = 0;
  unsigned char* out = &token_out;
  unsigned char* in = &token_in;
  if constexpr (moves_device_memory<B>::value) {
    // The transport takes device memory only; the tokens' values are never read.
    out = memory_of(b, s).scratch(2);
    in = out + 1;
  }
  for (int d = 1; d < p; d *= 2) {
    auto rr = b.irecv(in, 1, mod(r - d, p), tag_barrier);
    auto sr = b.isend(out, 1, mod(r + d, p), tag_barrier);
    rr.wait(until);
    sr.wait(until);
  }
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
  const auto len = [&](const block& c, std::size_t m) {
    return std::min(a.seg, c.count - m * a.seg);
  };

  // 1. Push every shard this rank does not serve to its server. Posted before any wait, so no
  //    server can be left waiting on a push that was never sent.
  std::vector<request> pushes;
  for (int j = 0; j < k; ++j) {
    if (j == r) continue;
    const block c = shard(j);
    for (std::size_t m = 0; m < segments_of(c.count, a.seg); ++m) {
      pushes.push_back(
          b.isend(bytes_at(in, c.begin + m * a.seg, es), len(c, m) * es, j, tag_ps_push));
    }
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
    const block c = shard(j);
    for (std::size_t m = 0; m < segments_of(c.count, a.seg); ++m) {
      pushes[pushed++].wait(a.until);
      pulls.push_back(
          b.irecv(bytes_at(out, c.begin + m * a.seg, es), len(c, m) * es, j, tag_ps_pull));
    }
  }
  pushes.clear();
  wait_all(pulls, a.until);
  wait_all(results, a.until);
}

}  // namespace distcomm::strategy::detail
