// strategy::native: the backend's own collectives (MPI_Allreduce, gloo::allreduce, NCCL, the
// local backend's shared-memory reduction). Using it with a backend that has no native allreduce
// is a compile error. Collectives the backend lacks fall back to the point-to-point algorithms on
// host memory; on a backend whose buffers are device memory (moves_device_memory) a fallback is
// refused instead (strategy::ring, tree and parameter_server run there on the backend's own
// memory operations).
#pragma once

#include <string>
#include <type_traits>

#include "distcomm/backend.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/base.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm::strategy {

class native {
 public:
  static constexpr algorithm id = algorithm::native;
  static constexpr const char* name = class_name_of(id);
  // The backend's collectives run after the agreement; the fallback's writes go through the
  // memory operations policy (check/gate.hpp).
  static constexpr bool overlaps_agreement = true;
  explicit native(const config& c) : fallback_(c) {}

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    static_assert(has_native_allreduce_v<B>,
                  "strategy::native needs a backend with its own allreduce; this backend has "
                  "none: use strategy::ring, tree, parameter_server or automatic");
    if (!accepts_carried<B>(0)) {
      throw invalid_argument_error(std::string("strategy native: backend '") + B::name +
                                   "' does not reduce in rank order, so DISTCOMM_DETERMINISTIC=1 "
                                   "cannot be honoured; use ring, tree, parameter_server or "
                                   "automatic");
    }
    b.native_allreduce(in, out, count, t, op, until);
  }

  // Deterministic mode on a backend whose reduction is not a rank-order fold is refused at every
  // size: the call check must not carry (and so do) such an allreduce either.
  template <class B>
  bool accepts_carried(std::size_t) const noexcept {
    return !fallback_.deterministic() || distcomm::detail::native_is_deterministic<B>::value;
  }

  template <class B>
  void reduce_scatter(B& b, const void* in, void* out, std::size_t recv_count, dtype t,
                      reduce_op op, deadline until) {
    if constexpr (distcomm::detail::has_native_reduce_scatter<B>::value) {
      if (!fallback_.deterministic() || distcomm::detail::native_is_deterministic<B>::value) {
        return b.native_reduce_scatter(in, out, recv_count, t, op, until);
      }
      if constexpr (detail::moves_device_memory<B>::value) {
        // The rank-ordered fallback would combine device pointers on the host.
        throw invalid_argument_error(std::string("strategy native: backend '") + B::name +
                                     "' moves device memory and does not reduce in rank order, "
                                     "so DISTCOMM_DETERMINISTIC=1 is not available on it; unset "
                                     "it, or use strategy ring, tree or parameter_server");
      }
    }
    if constexpr (detail::moves_device_memory<B>::value) {
      host_fallback_refused<B>("reduce_scatter");
    } else {
      fallback_.reduce_scatter(b, in, out, recv_count, t, op, until);
    }
  }

  template <class B>
  void allgather(B& b, const void* in, void* out, std::size_t send_count, dtype t, deadline until) {
    if constexpr (distcomm::detail::has_native_allgather<B>::value) {
      b.native_allgather(in, out, send_count, t, until);
    } else if constexpr (detail::moves_device_memory<B>::value) {
      host_fallback_refused<B>("allgather");
    } else {
      fallback_.allgather(b, in, out, send_count, t, until);
    }
  }

  template <class B>
  void broadcast(B& b, void* data, std::size_t count, dtype t, int root, deadline until) {
    if constexpr (distcomm::detail::has_native_broadcast<B>::value) {
      b.native_broadcast(data, count, t, root, until);
    } else if constexpr (detail::moves_device_memory<B>::value) {
      host_fallback_refused<B>("broadcast");
    } else {
      fallback_.broadcast(b, data, count, t, root, until);
    }
  }

  template <class B>
  void alltoall(B& b, const void* in, void* out, std::size_t block_count, dtype t, deadline until) {
    if constexpr (distcomm::detail::has_native_alltoall<B>::value) {
      b.native_alltoall(in, out, block_count, t, until);
    } else {
      fallback_.alltoall(b, in, out, block_count, t, until);  // pairwise runs on device memory
    }
  }

  // The backend's own (MPI_Alltoallv) once the ranks agree on the counts, which MPI does not
  // check (a receiver expecting more than is sent would keep stale data), else pairwise.
  // `counts_agreed`: the call check's exchange compared them already (check/carried.hpp), or the
  // backend's own alltoallv compares them (shm: native_alltoallv_checks_counts).
  template <class B>
  void alltoallv(B& b, const void* in, const std::size_t* send_counts,
                 const std::size_t* send_displs, void* out, const std::size_t* recv_counts,
                 const std::size_t* recv_displs, dtype t, deadline until,
                 bool counts_agreed = false) {
    if constexpr (distcomm::detail::has_native_alltoallv<B>::value) {
      if (b.size() > 1 && !counts_agreed &&
          !distcomm::detail::native_alltoallv_checks_counts<B>::value) {
        detail::agree_on_counts(b, detail::exchange_layout{send_counts, send_displs, 0},
                                detail::exchange_layout{recv_counts, recv_displs, 0}, until);
      }
      b.native_alltoallv(in, send_counts, send_displs, out, recv_counts, recv_displs, t, until);
    } else {
      fallback_.alltoallv(b, in, send_counts, send_displs, out, recv_counts, recv_displs, t, until,
                          counts_agreed);
    }
  }

  // Collectives no backend offers natively yet: the point-to-point ones (which refuse device
  // memory where they cannot run on it).
  template <class B>
  void allgatherv(B& b, const void* in, void* out, const std::size_t* counts,
                  const std::size_t* displs, dtype t, deadline until) {
    fallback_.allgatherv(b, in, out, counts, displs, t, until);
  }
  template <class B>
  void gather(B& b, const void* in, void* out, std::size_t count, dtype t, int root,
              deadline until) {
    fallback_.gather(b, in, out, count, t, root, until);
  }
  template <class B>
  void scatter(B& b, const void* in, void* out, std::size_t count, dtype t, int root,
               deadline until) {
    fallback_.scatter(b, in, out, count, t, root, until);
  }
  template <class B>
  void reduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op, int root,
              deadline until) {
    fallback_.reduce(b, in, out, count, t, op, root, until);
  }

  template <class B>
  void barrier(B& b, deadline until) {
    if constexpr (distcomm::detail::has_native_barrier<B>::value) {
      b.native_barrier(until);
    } else {
      fallback_.barrier(b, until);
    }
  }

 private:
  // A device-memory backend without this native collective: the point-to-point fallback would
  // memcpy and combine device pointers on the host.
  template <class B>
  [[noreturn]] static void host_fallback_refused(const char* collective) {
    throw invalid_argument_error(std::string("strategy native: backend '") + B::name +
                                 "' has no native " + collective +
                                 " and moves device memory, which the point-to-point fallback "
                                 "cannot reduce or copy");
  }

  p2p_base fallback_;
};

}  // namespace distcomm::strategy
