// strategy::tree: pipelined binary-tree reduce to rank 0 followed by a pipelined broadcast.
// About 2·log2(p) message latencies instead of the ring's 2(p-1): the choice for small buffers.
#pragma once

#include "distcomm/strategy/algorithms/tree.hpp"
#include "distcomm/strategy/base.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm::strategy {

class tree : public p2p_base {
 public:
  static constexpr algorithm id = algorithm::tree;
  static constexpr const char* name = class_name_of(id);
  using p2p_base::p2p_base;

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    // A tree's combine order is not rank order; deterministic mode uses the shared ordered path.
    if (deterministic_) return ordered_allreduce(b, in, out, count, t, op, until);
    detail::tree_allreduce(b, in, out, count, args(t, op, count, until), scratch_);
    finish(b, until);
  }
};

}  // namespace distcomm::strategy
