// Recursive doubling: log2(p) rounds in which partners exchange the whole buffer and both combine
// it, the algorithm of strategy::recursive_doubling. Not part of the public API.
#pragma once

#include <cstddef>

#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

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
  // This rank's operand so far: `in` until the first combine writes `out` (the first message
  // goes from `in`, before anything is written: check/gate.hpp).
  const void* mine = in;
  int vr = r - rem;  // rank among the p' that take part
  if (r < 2 * rem) {
    b.irecv(tmp, bytes, r - 1, tag_recursive_doubling).wait(a.until);
    m.combine(out, tmp, mine, count, a.type, a.op);  // rank r - 1's operand first
    mine = out;
    vr = r / 2;
  }
  // Participant v is rank 2v + 1 when it took a partner in, else v + rem: increasing in v, so the
  // lower participant is the lower rank.
  const auto rank_of = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vpeer = vr ^ mask;
    const int peer = rank_of(vpeer);
    auto recv = b.irecv(tmp, bytes, peer, tag_recursive_doubling);
    auto send = b.isend(mine, bytes, peer, tag_recursive_doubling);
    recv.wait(a.until);
    send.wait(a.until);  // `out` is overwritten next
    if (vpeer < vr) {
      m.combine(out, tmp, mine, count, a.type, a.op);
    } else {
      m.combine(out, mine, tmp, count, a.type, a.op);
    }
    mine = out;
  }
  copy_elems(m, out, mine, count, a.type);  // (p' = 1 only: nothing combined)
  finish_avg(m, out, count, a, p);
  if (r < 2 * rem) b.isend(out, bytes, r - 1, tag_recursive_doubling).wait(a.until);
}

}  // namespace distcomm::strategy::detail
