// strategy::ring: bandwidth-optimal allreduce as a segmented, pipelined ring reduce-scatter
// followed by a ring allgather. Cost 2(p-1)·alpha + 2(p-1)/p·n·beta: the choice for large buffers.
#pragma once

#include "distcomm/strategy/algorithms/ring.hpp"
#include "distcomm/strategy/base.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm::strategy {

class ring : public p2p_base {
 public:
  static constexpr algorithm id = algorithm::ring;
  static constexpr const char* name = class_name_of(id);
  using p2p_base::p2p_base;

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    if (deterministic_) return ordered_allreduce(b, in, out, count, t, op, until);
    const auto a = args(t, op, count, until);
    const block mine =
        partition(count, static_cast<std::size_t>(b.size()), static_cast<std::size_t>(b.rank()));
    detail::ring_reduce_scatter(b, in, detail::bytes_at(out, mine.begin, dtype_size(t)), count, a,
                                scratch_);
    detail::ring_allgather(b, out, count, t, a.seg, until);
    finish(b, until);
  }
};

}  // namespace distcomm::strategy
