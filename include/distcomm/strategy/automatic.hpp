// strategy::automatic: picks ring, tree, parameter_server, recursive_doubling or native per buffer
// size from a table.
// The table is DISTCOMM_ALGO when set, else the backend's own `default_algo` when it declares
// one, else builtin_table below. Sizes not covered by the table use ring.
#pragma once

#include <optional>
#include <string>

#include "distcomm/backend.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/identity.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/parameter_server.hpp"
#include "distcomm/strategy/recursive_doubling.hpp"
#include "distcomm/strategy/ring.hpp"
#include "distcomm/strategy/table.hpp"
#include "distcomm/strategy/tree.hpp"

namespace distcomm::strategy {

class automatic : public p2p_base {
 public:
  static constexpr algorithm id = algorithm::automatic;
  static constexpr const char* name = class_name_of(id);

  // For backends that declare no table of their own. Recursive doubling up to 16 KiB (log2(p)
  // latencies, the fewest), tree to 64 KiB, ring above: where the alpha-beta costs of tree and ring
  // cross for 8 ranks (tree ~(2 log2 p)·alpha + 4n·beta on its busiest node, ring 2(p-1)·alpha +
  // 2(p-1)/p·n·beta, so n* ~ 3.6·alpha/beta) with the alpha and beta of TCP loopback; the
  // measurements are in docs/PERFORMANCE.md, "The built-in automatic table". Backends with their
  // own measurements override it with `default_algo` (docs/COLLECTIVES.md, "The automatic table").
  static constexpr const char* builtin_table = "rd:0-16K;tree:16K-64K;ring:64K-max";

  explicit automatic(const config& c)
      : p2p_base(c), configured_(c.algo), ring_(c), tree_(c), ps_(c), rd_(c), native_(c) {}

  // The algorithm this strategy uses for a buffer of `bytes` on backend B.
  template <class B>
  algorithm choose(std::size_t bytes) {
    if constexpr (distcomm::detail::moves_device_memory<B>::value && has_native_allreduce_v<B>) {
      // A device-memory backend's own collectives (NCCL's) beat point-to-point rounds issued
      // from the host at every size: use them whatever the table says. Deterministic mode is
      // refused rather than silently switching algorithms; ring, tree and parameter_server
      // honour it on device memory when asked for by name.
      if (deterministic_ && !distcomm::detail::native_is_deterministic<B>::value) {
        throw invalid_argument_error(std::string("strategy automatic: backend '") + B::name +
                                     "' moves device memory and does not reduce in rank order, "
                                     "so DISTCOMM_DETERMINISTIC=1 is not available on it; use "
                                     "strategy ring, tree or parameter_server for it");
      }
      return algorithm::native;
    }
    algorithm a = table<B>().pick(bytes, algorithm::ring);
    if (a == algorithm::native && deterministic_ &&
        !distcomm::detail::native_is_deterministic<B>::value) {
      a = algorithm::ring;  // ring honours deterministic mode; this native would not
    }
    return a;
  }

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    if constexpr (distcomm::detail::moves_device_memory<B>::value && has_native_allreduce_v<B>) {
      choose<B>(count * dtype_size(t));  // always native; refuses deterministic mode
      native_.allreduce(b, in, out, count, t, op, until);
    } else {
      switch (choose<B>(count * dtype_size(t))) {
        case algorithm::tree:
          return tree_.allreduce(b, in, out, count, t, op, until);
        case algorithm::parameter_server:
          return ps_.allreduce(b, in, out, count, t, op, until);
        case algorithm::recursive_doubling:
          return rd_.allreduce(b, in, out, count, t, op, until);
        case algorithm::native:
          if constexpr (has_native_allreduce_v<B>) {
            return native_.allreduce(b, in, out, count, t, op, until);
          } else {
            throw invalid_argument_error(std::string("strategy automatic: the table '") +
                                         table<B>().to_string() + "' names native, but backend '" +
                                         B::name + "' has no native allreduce");
          }
        case algorithm::ring:
        case algorithm::automatic:     // never in a table (in_tables)
        case algorithm::hierarchical:  // likewise
          break;
      }
      ring_.allreduce(b, in, out, count, t, op, until);
    }
  }

  // A table naming native at `bytes` on a backend without a native allreduce is refused by
  // allreduce(): the call check must not carry (and so do) such an allreduce either.
  template <class B>
  bool accepts_carried(std::size_t bytes) {
    if constexpr (has_native_allreduce_v<B>) {
      (void)bytes;
      return true;  // deterministic mode turns native into ring here (choose())
    } else {
      return table<B>().pick(bytes, algorithm::ring) != algorithm::native;
    }
  }

  // The backend's own alltoall where it has one (MPI_Alltoall), else Bruck or pairwise.
  template <class B>
  void alltoall(B& b, const void* in, void* out, std::size_t block_count, dtype t, deadline until) {
    if constexpr (distcomm::detail::has_native_alltoall<B>::value) {
      native_.alltoall(b, in, out, block_count, t, until);
    } else {
      p2p_base::alltoall(b, in, out, block_count, t, until);
    }
  }

  // The same for alltoallv (MPI_Alltoallv after the counts are agreed), else pairwise.
  template <class B>
  void alltoallv(B& b, const void* in, const std::size_t* send_counts,
                 const std::size_t* send_displs, void* out, const std::size_t* recv_counts,
                 const std::size_t* recv_displs, dtype t, deadline until,
                 bool counts_agreed = false) {
    if constexpr (distcomm::detail::has_native_alltoallv<B>::value) {
      native_.alltoallv(b, in, send_counts, send_displs, out, recv_counts, recv_displs, t, until,
                        counts_agreed);
    } else {
      p2p_base::alltoallv(b, in, send_counts, send_displs, out, recv_counts, recv_displs, t, until,
                          counts_agreed);
    }
  }

  template <class B>
  const algo_table& table() {
    if (!resolved_) {
      if (!configured_.empty()) {
        resolved_ = configured_;
      } else if (const char* own = default_algo_of<B>()) {
        resolved_ = algo_table::parse(own, std::string(B::name) + " default table");
      } else {
        resolved_ = algo_table::parse(builtin_table, "built-in table");
      }
    }
    return *resolved_;
  }

 private:
  algo_table configured_;
  std::optional<algo_table> resolved_;
  ring ring_;
  tree tree_;
  parameter_server ps_;
  recursive_doubling rd_;
  native native_;
};

}  // namespace distcomm::strategy
