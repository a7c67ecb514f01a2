// strategy::recursive_doubling: log2(p) rounds in which partners exchange the whole buffer and
// both combine it. Cost log2(p)·(alpha + n·beta): one message latency per round, the fewest of any
// strategy, while every round moves the whole buffer: the choice for buffers of a few KiB and less.
#pragma once

#include "distcomm/strategy/algorithms/recursive_doubling.hpp"
#include "distcomm/strategy/base.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm::strategy {

class recursive_doubling : public p2p_base {
 public:
  static constexpr algorithm id = algorithm::recursive_doubling;
  static constexpr const char* name = class_name_of(id);
  using p2p_base::p2p_base;

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    // Partners combine in pairs, not in rank order; deterministic mode uses the ordered path.
    if (deterministic_) return ordered_allreduce(b, in, out, count, t, op, until);
    detail::recursive_doubling_allreduce(b, in, out, count, args(t, op, count, until), scratch_);
    finish(b, until);
  }
};

}  // namespace distcomm::strategy
