// The contract between strategies and transports. A backend B is a movable type with:
//
//   static constexpr const char* name;                      // "local", "mpi", ...
//   int rank() const;  int size() const;
//   [[nodiscard]] B::request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
//   [[nodiscard]] B::request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
//   void abort(const std::string& reason) noexcept;        // fail every pending and future wait
//
// and B::request is a movable RAII handle with `bool test()` and `void wait(deadline)`.
// DistComm's own backends also declare `static constexpr backend_traits traits` (name, memory,
// capabilities: backend_traits.hpp), `name` being traits.name(), and
// `static B connect(const config&, const job* given)`, what the registry makes them with.
// check_backend<B>() (backend_check.hpp) checks the members at compile time.
// Rules every backend keeps (strategies rely on them; docs/ARCHITECTURE.md explains why):
//  * messages from one sender to one receiver with the same tag match in the order they were
//    posted (MPI's non-overtaking rule);
//  * a receive whose size differs from the matching send fails with mismatch_error (no truncation);
//  * wait() past its deadline throws timeout_error naming the peer, the tag and the bytes;
//  * destroying an incomplete request cancels it: once the destructor returns, the transport no
//    longer touches the buffer.
// A backend may also offer native collectives, detected at compile time (has_native_* below), and
//   void send_detached(const void* data, std::size_t bytes, int peer, tag_t tag);
// a small send nobody waits for: the bytes are copied at once and delivered in order with the
// sender's other messages on that tag, even after the backend object is gone (the local
// backend's ranks share a world that outlives it). Without it, such a send is an isend waited for
// a moment: on a network transport small messages leave at once. A backend may offer
//   [[nodiscard]] B::request irecv_up_to(void* data, std::size_t capacity, std::size_t* got,
//                                        int peer, tag_t tag);
// a receive that takes a message of any size up to `capacity` and, once complete, writes its size
// to *got (a larger message fails with mismatch_error): the call check's messages then have the
// size of what they carry (check/carried.hpp). A backend may offer
//   [[nodiscard]] B::request irecv_any(void* data, std::size_t bytes, int* source, tag_t tag);
// a receive from any rank (MPI_ANY_SOURCE): it takes the first message on `tag` to arrive that no
// receive posted earlier takes (one from its sender, or another irecv_any), of exactly `bytes`
// (mismatch_error otherwise), and once complete *source holds the sender's rank; destroying it
// before a message matched retracts it, as an irecv. A backend on which a message
// nobody receives is an error declares `static constexpr bool unreceived_messages_ok = false`
// (MPI: Open MPI reuses a freed communicator's context id and delivers the message into the next
// communicator); then such messages (the mismatch check's departure notices) are not sent. A
// backend without irecv_up_to whose message cost grows with size at a few hundred bytes declares
// `static constexpr std::size_t carried_bytes` below the default 4 KiB: the largest allreduce the
// call check carries in its own messages (check/carried.hpp). A backend whose native_alltoallv
// compares every pair's counts itself, raising the same mismatch_error on every rank before it
// writes anything, declares `static constexpr bool native_alltoallv_checks_counts = true`; the
// strategies then skip their own rounds for it.
//
// A backend that moves device memory may offer
//   void host_allgather(const void* in, void* out, std::size_t bytes, deadline until);
// every rank's `bytes` of host memory `in`, in rank order, into host memory `out`: the group
// agreements' own exchange (communicator/groups.hpp: split's colors and keys, subset's lists),
// through device memory of its own.
//
// Memory. A backend moves host memory, or CUDA memory when its traits say
// `.moves(memory_kind::cuda)` (NCCL; a backend without traits declares `static constexpr bool
// moves_device_memory = true`); tensors must then be memory_kind::cuda. The point-to-point
// strategies touch buffers only through a memory operations policy chosen at compile time
// (strategy::detail::memory_of): on a host backend the inline host kernels of core/reduce.hpp and
// a scratch buffer of the strategy, exactly as if they were called directly; on a device backend
// the object returned by `b.memory()`, with
//   void copy(void* dst, const void* src, std::size_t bytes);
//   void combine(void* dst, const void* a, const void* b, std::size_t count, dtype, reduce_op);
//   void divide(void* dst, const void* src, std::size_t count, dtype, std::size_t divisor);
//   void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype,
//             reduce_op);                       // in: a host array of device pointers
//   unsigned char* scratch(std::size_t bytes);  // grow-only device buffer of the backend
//   void complete(deadline until);              // the work enqueued so far has finished
// with core/reduce.hpp's semantics (fold rounds after every step, so results match bit for bit).
// The operations may be asynchronous, but must be ordered with the backend's sends and receives
// (NCCL: one stream). On a device backend the strategies also assume NCCL's point-to-point
// behaviour (operations issued as one group at the first wait, groups completing in order) and
// post round by round (strategy::detail::lockstep). Without memory(), strategy::native is the only
// strategy that compiles on a device backend.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend_traits.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm {

using clock = std::chrono::steady_clock;
using deadline = clock::time_point;
using tag_t = std::uint32_t;
// Tags below this are the collectives' own (small numbers: strategy/detail.hpp,
// check/exchange.hpp); users' point-to-point messages (communicator::send) carry user_tag_base +
// their tag. A backend whose transport allows fewer tags maps them into its range (the mpi backend,
// MPI_TAG_UB).
inline constexpr tag_t user_tag_base = tag_t{1} << 30;

// deadline_after(seconds) saturates instead of overflowing for very long timeouts; `from` is now
// when the caller has read the clock already.
inline deadline deadline_after(deadline from, std::chrono::duration<double> timeout) {
  const auto max_left = std::chrono::duration<double>(deadline::max() - from);
  if (timeout >= max_left) return deadline::max();
  return from + std::chrono::duration_cast<clock::duration>(timeout);
}
inline deadline deadline_after(std::chrono::duration<double> timeout) {
  return deadline_after(clock::now(), timeout);
}

namespace detail {

template <class, class = void>
struct has_native_allreduce : std::false_type {};
template <class B>
struct has_native_allreduce<B, std::void_t<decltype(std::declval<B&>().native_allreduce(
                                   std::declval<const void*>(), std::declval<void*>(),
                                   std::size_t{}, dtype{}, reduce_op{}, deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_native_reduce_scatter : std::false_type {};
template <class B>
struct has_native_reduce_scatter<B, std::void_t<decltype(std::declval<B&>().native_reduce_scatter(
                                        std::declval<const void*>(), std::declval<void*>(),
                                        std::size_t{}, dtype{}, reduce_op{}, deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_native_allgather : std::false_type {};
template <class B>
struct has_native_allgather<B, std::void_t<decltype(std::declval<B&>().native_allgather(
                                   std::declval<const void*>(), std::declval<void*>(),
                                   std::size_t{}, dtype{}, deadline{}))>> : std::true_type {};

template <class, class = void>
struct has_native_broadcast : std::false_type {};
template <class B>
struct has_native_broadcast<B,
                            std::void_t<decltype(std::declval<B&>().native_broadcast(
                                std::declval<void*>(), std::size_t{}, dtype{}, int{}, deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_native_alltoall : std::false_type {};
template <class B>
struct has_native_alltoall<B, std::void_t<decltype(std::declval<B&>().native_alltoall(
                                  std::declval<const void*>(), std::declval<void*>(), std::size_t{},
                                  dtype{}, deadline{}))>> : std::true_type {};

template <class, class = void>
struct has_native_alltoallv : std::false_type {};
template <class B>
struct has_native_alltoallv<B, std::void_t<decltype(std::declval<B&>().native_alltoallv(
                                   std::declval<const void*>(), std::declval<const std::size_t*>(),
                                   std::declval<const std::size_t*>(), std::declval<void*>(),
                                   std::declval<const std::size_t*>(),
                                   std::declval<const std::size_t*>(), dtype{}, deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_native_barrier : std::false_type {};
template <class B>
struct has_native_barrier<B, std::void_t<decltype(std::declval<B&>().native_barrier(deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_send_detached : std::false_type {};
template <class B>
struct has_send_detached<B, std::void_t<decltype(std::declval<B&>().send_detached(
                                std::declval<const void*>(), std::size_t{}, int{}, tag_t{}))>>
    : std::true_type {};

template <class, class = void>
struct has_irecv_up_to : std::false_type {};
template <class B>
struct has_irecv_up_to<
    B, std::void_t<decltype(std::declval<B&>().irecv_up_to(
           std::declval<void*>(), std::size_t{}, std::declval<std::size_t*>(), int{}, tag_t{}))>>
    : std::true_type {};

template <class, class = void>
struct has_host_allgather : std::false_type {};
template <class B>
struct has_host_allgather<
    B, std::void_t<decltype(std::declval<B&>().host_allgather(
           std::declval<const void*>(), std::declval<void*>(), std::size_t{}, deadline{}))>>
    : std::true_type {};

template <class, class = void>
struct has_irecv_any : std::false_type {};
template <class B>
struct has_irecv_any<B, std::void_t<decltype(std::declval<B&>().irecv_any(
                            std::declval<void*>(), std::size_t{}, std::declval<int*>(), tag_t{}))>>
    : std::true_type {};

// `std::optional<B> split(const std::vector<int>& members, const std::string& name)`: the
// backend can make sub-communicators (communicator.hpp, split and subset).
template <class, class = void>
struct has_split : std::false_type {};
template <class B>
struct has_split<B,
                 std::void_t<decltype(std::declval<B&>().split(
                     std::declval<const std::vector<int>&>(), std::declval<const std::string&>()))>>
    : std::true_type {};

// `std::optional<B> survivors(const std::vector<int>& members, const std::string& name)`: the
// backend of the survivors after a failure, where split() needs the failed backend's transport
// (NCCL's communicator is aborted): communicator::shrink makes the survivors' with it, else with
// split().
template <class, class = void>
struct has_survivors : std::false_type {};
template <class B>
struct has_survivors<
    B, std::void_t<decltype(std::declval<B&>().survivors(std::declval<const std::vector<int>&>(),
                                                         std::declval<const std::string&>()))>>
    : std::true_type {};

// `std::shared_ptr<store> group_store()`: a namespace of the job's store that is this backend
// instance's, the same on every member (communicator::shrink agrees there on the survivors).
template <class, class = void>
struct has_group_store : std::false_type {};
template <class B>
struct has_group_store<B, std::void_t<decltype(std::declval<B&>().group_store())>>
    : std::true_type {};

// `static constexpr backend_traits traits`: the backend declares what it is (backend_traits.hpp).
template <class, class = void>
struct has_traits : std::false_type {};
template <class B>
struct has_traits<B, std::void_t<decltype(B::traits)>> : std::true_type {};

// A backend's declared capabilities (B::traits) against what its members make possible: split
// needs split(), shrink needs split() and group_store(), grow connects through the job's store.
// The build checks it for every backend (cmake/communicators.cpp.in).
template <class B>
constexpr bool declaration_matches() {
  constexpr backend_traits t = B::traits;
  return t.can(capability::split) == has_split<B>::value &&
         (!t.can(capability::shrink) || (has_split<B>::value && has_group_store<B>::value)) &&
         (!t.can(capability::grow) || t.can(capability::store));
}

template <class, class = void>
struct unreceived_messages_ok : std::true_type {};
template <class B>
struct unreceived_messages_ok<B, std::void_t<decltype(B::unreceived_messages_ok)>>
    : std::bool_constant<B::unreceived_messages_ok> {};

template <class, class = void>
struct native_alltoallv_checks_counts : std::false_type {};
template <class B>
struct native_alltoallv_checks_counts<B, std::void_t<decltype(B::native_alltoallv_checks_counts)>>
    : std::bool_constant<B::native_alltoallv_checks_counts> {};

template <class, class = void>
struct native_is_deterministic : std::false_type {};
template <class B>
struct native_is_deterministic<B, std::enable_if_t<B::native_is_deterministic>> : std::true_type {};

// Run-time traits, for a backend that learns them only when it starts (plugin_backend, from the
// plugin it loaded). Such a backend may have
//   bool unreceived_messages_ok_now() const;  // consulted when the static trait allows them
//   void fill_defaults(config& c);             // fills what c leaves to the backend (algo,
//                                              // segment_bytes, fusion_cutoff) and may keep c
//   const std::string& instance_name() const;  // the name messages use instead of B::name
// A communicator calls fill_defaults on its configuration before the static defaults apply.
// Backends without them compile to exactly what they did before.
template <class, class = void>
struct has_unreceived_messages_ok_now : std::false_type {};
template <class B>
struct has_unreceived_messages_ok_now<
    B, std::void_t<decltype(std::declval<const B&>().unreceived_messages_ok_now())>>
    : std::true_type {};

template <class B>
bool unreceived_messages_ok_at(const B& b) noexcept {
  if constexpr (!unreceived_messages_ok<B>::value) {
    return false;
  } else if constexpr (has_unreceived_messages_ok_now<B>::value) {
    return b.unreceived_messages_ok_now();
  } else {
    return true;
  }
}

// `const std::string& instance_name() const`: a backend that learns its name at run time (a
// plugin's own name).
template <class, class = void>
struct has_instance_name : std::false_type {};
template <class B>
struct has_instance_name<B, std::void_t<decltype(std::declval<const B&>().instance_name())>>
    : std::true_type {};

template <class B, class C, class = void>
struct has_fill_defaults : std::false_type {};
template <class B, class C>
struct has_fill_defaults<
    B, C, std::void_t<decltype(std::declval<B&>().fill_defaults(std::declval<C&>()))>>
    : std::true_type {};

// c after the backend filled in what it decides at run time (nothing for most backends).
template <class B, class C>
C with_runtime_defaults(B& b, C c) {
  if constexpr (has_fill_defaults<B, C>::value) b.fill_defaults(c);
  return c;
}

// The name messages use: the backend's instance_name(), which lives as long as the backend, else
// B::name.
template <class B>
const char* backend_name_of(const B& b) noexcept {
  if constexpr (has_instance_name<B>::value) {
    return b.instance_name().c_str();
  } else {
    (void)b;
    return B::name;
  }
}

}  // namespace detail

// True when backend B has its own allreduce (strategy::native requires it).
template <class B>
inline constexpr bool has_native_allreduce_v = detail::has_native_allreduce<B>::value;

// ---- the defaults a backend may override ----------------------------------------------------

// The segment when DISTCOMM_SEGMENT_SIZE is not set: the backend's `default_segment_bytes` when it
// declares one (a transport whose every message costs more wants fewer, larger ones), else 256 KiB.
inline constexpr std::size_t default_segment_bytes = std::size_t{256} << 10;
// The fusion cutoff when DISTCOMM_FUSION_CUTOFF is not set. Packing n bytes costs two copies; a
// collective of its own costs the backend's fixed per-call time, so where packing stops paying
// depends on the backend (docs/ARCHITECTURE.md, Fusion): a backend declares
// `static constexpr std::size_t default_fusion_cutoff` when 1 MiB does not suit it.
inline constexpr std::size_t default_fusion_cutoff = std::size_t{1} << 20;

namespace detail {

// The backend's traits say its buffers are CUDA memory (the NCCL backend); a backend without
// traits (an application's own) may say so with `static constexpr bool moves_device_memory`.
template <class B, class = void>
struct moves_device_memory : std::false_type {};
template <class B>
struct moves_device_memory<B, std::enable_if_t<B::moves_device_memory>> : std::true_type {};
template <class B>
struct moves_device_memory<B, std::enable_if_t<B::traits.memory() == memory_kind::cuda>>
    : std::true_type {};

// `memory()`, the memory operations of a device-memory backend (top of this file).
template <class, class = void>
struct has_memory_ops : std::false_type {};
template <class B>
struct has_memory_ops<B, std::void_t<decltype(std::declval<B&>().memory())>> : std::true_type {};

template <class, class = void>
struct backend_segment : std::integral_constant<std::size_t, default_segment_bytes> {};
template <class B>
struct backend_segment<B, std::void_t<decltype(B::default_segment_bytes)>>
    : std::integral_constant<std::size_t, B::default_segment_bytes> {};

template <class, class = void>
struct backend_cutoff : std::integral_constant<std::size_t, default_fusion_cutoff> {};
template <class B>
struct backend_cutoff<B, std::void_t<decltype(B::default_fusion_cutoff)>>
    : std::integral_constant<std::size_t, B::default_fusion_cutoff> {};

template <class, class = void>
struct backend_default_algo {
  static const char* get() { return nullptr; }
};
template <class B>
struct backend_default_algo<B, std::void_t<decltype(B::default_algo)>> {
  static const char* get() { return B::default_algo; }
};

}  // namespace detail

// Backend B's segment and fusion cutoff when the configuration leaves them to it.
template <class B>
inline constexpr std::size_t segment_bytes_for = detail::backend_segment<B>::value;
template <class B>
inline constexpr std::size_t fusion_cutoff_for = detail::backend_cutoff<B>::value;
// Backend B's own table for strategy::automatic (`default_algo`), or nullptr.
template <class B>
const char* default_algo_of() {
  return detail::backend_default_algo<B>::get();
}

}  // namespace distcomm
