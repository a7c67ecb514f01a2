// The barrier every point-to-point strategy uses: a dissemination barrier. Not part of the public
// API.
#pragma once

#include <type_traits>

#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

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

}  // namespace distcomm::strategy::detail
