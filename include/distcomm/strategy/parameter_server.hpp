// strategy::parameter_server: k server ranks (0 .. k-1) each own 1/k of the buffer, receive it
// from every rank, reduce it in rank order and send it back. k = 1 is the classic TensorFlow
// parameter server; k = size is fully sharded. k comes from DISTCOMM_PS_SERVERS (0 = all ranks)
// or the constructor, and is capped at the world size.
#pragma once

#include <algorithm>

#include "distcomm/core/error.hpp"
#include "distcomm/strategy/algorithms/sharded.hpp"
#include "distcomm/strategy/base.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm::strategy {

class parameter_server : public p2p_base {
 public:
  static constexpr algorithm id = algorithm::parameter_server;
  static constexpr const char* name = class_name_of(id);

  explicit parameter_server(const config& c) : parameter_server(c, c.ps_servers) {}
  parameter_server(const config& c, int servers) : p2p_base(c), servers_(servers) {
    if (servers < 0) {
      throw invalid_argument_error("parameter_server: " + std::to_string(servers) +
                                   " servers requested; use 1 or more, or 0 for every rank");
    }
  }

  // Server ranks used in a world of `size` ranks.
  int servers(int size) const noexcept { return servers_ == 0 ? size : std::min(servers_, size); }

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    // Servers already reduce in rank order, so deterministic mode changes nothing here.
    detail::ps_allreduce(b, in, out, count, servers(b.size()), args(t, op, count, until), scratch_);
    finish(b, until);
  }

 private:
  int servers_;
};

}  // namespace distcomm::strategy
