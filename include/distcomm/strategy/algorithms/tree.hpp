// The tree family: a pipelined binary-tree allreduce (reduce to rank 0, then broadcast down), and
// the pipelined binary-tree broadcast every point-to-point strategy uses. About 2·log2(p) message
// latencies where the ring needs 2(p-1). Not part of the public API.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

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
  const segments segs(count, a.seg);
  const std::size_t nseg = segs.count();
  const std::size_t slot_bytes = a.seg * es;
  unsigned char* slots = m.scratch(4 * slot_bytes + 1);
  const auto slot = [&](std::size_t k, int i) {
    return slots + ((k % 2) * 2 + static_cast<std::size_t>(i)) * slot_bytes;
  };
  std::vector<request> recvs[2];
  const auto post = [&](std::size_t k) {
    for (int i = 0; i < nk; ++i) {
      recvs[k % 2].push_back(b.irecv(slot(k, i), segs.length(k) * es, kids[i], tag_tree_up));
    }
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, nseg); ++k) post(k);

  std::vector<request> sends;
  for (std::size_t k = 0; k < nseg; ++k) {
    const std::size_t n = segs.length(k);
    const unsigned char* src = bytes_at(in, segs.offset(k), es);
    unsigned char* dst = bytes_at(out, segs.offset(k), es);
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
  if (r != 0) post_recvs(b, down, out, segs, es, parent, tag_tree_down);
  for (std::size_t k = 0; k < nseg; ++k) {
    if (r != 0) down[k].wait(a.until);
    for (int i = 0; i < nk; ++i) post_send(b, sends, out, segs, k, es, kids[i], tag_tree_down);
  }
  down.clear();
  wait_all(sends, a.until);
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
  const segments segs(count, seg);
  const std::size_t nseg = segs.count();
  std::vector<request> recvs, sends;
  if (vr != 0) post_recvs(b, recvs, data, segs, es, parent, tag_broadcast);
  for (std::size_t k = 0; k < nseg; ++k) {
    if (vr != 0) recvs[k].wait(until);
    for (int c = 2 * vr + 1; c <= 2 * vr + 2 && c < p; ++c) {
      post_send(b, sends, data, segs, k, es, mod(c + root, p), tag_broadcast);
    }
  }
  recvs.clear();
  wait_all(sends, until);
}

}  // namespace distcomm::strategy::detail
