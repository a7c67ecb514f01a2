// fusion::none: a grouped allreduce runs one collective per tensor, in place.
#pragma once

#include "distcomm/config.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm::fusion {

class none {
 public:
  static constexpr const char* name = "none";
  explicit none(const config&) {}

  // run(in, out, count, dtype, op) performs one allreduce.
  template <class Run>
  void allreduce(span<const tensor_view> tensors, reduce_op op, Run&& run) {
    for (const tensor_view& t : tensors) {
      if (t.count != 0) run(t.data, t.data, t.count, t.type, op);
    }
  }
};

}  // namespace distcomm::fusion
