// The shm backend: the ranks are processes of one host, talking through shared memory.
//
// Each rank makes one POSIX shared-memory segment, maps every peer's (met through the job's
// store) and unlinks its own name once every rank has mapped it: from then on the segments live
// only as long as some process maps them, so nothing is left in /dev/shm however the processes
// end. Point-to-point messages go through one ring per ordered pair of ranks (sender copies in,
// receiver copies out; matched in order per sender and tag, no truncation). The native
// collectives reduce in shared memory directly, in rank order (deterministic): every rank copies
// its input into its segment, reduces its slice of every rank's copy, and every rank copies the
// slices out. Waits spin for a few microseconds, then sleep on a futex in the waiter's segment.
// A dead peer is noticed through a pidfd (Linux 5.3; the kernel says when a process has exited,
// whatever the cause, at no cost until asked) at every wake-up of a waiter, at least every 10 ms.
// Settings (README): DISTCOMM_SHM_RING (bytes per ordered pair, default 1 MiB), DISTCOMM_SHM_CHUNK
// (bytes per rank for the collectives, default 512 KiB), DISTCOMM_SHM_SINGLE_COPY (on: the large
// collectives read the peers' buffers straight from their processes where every rank may).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/fingerprint.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

namespace detail {
struct shm_state;
struct shm_op;
}  // namespace detail

// A pending send or receive. A send is complete once its last byte is in the ring. Move-only;
// destroying it while pending cancels it: a receive no message matched yet is retracted; a send
// or receive whose bytes are moving is finished through a copy (send) or into a sink (receive),
// so the caller's buffer is untouched once the destructor returns.
class [[nodiscard]] shm_request {
 public:
  shm_request() = default;  // an empty request is complete
  shm_request(shm_request&&) noexcept = default;
  shm_request& operator=(shm_request&& other) noexcept;
  shm_request(const shm_request&) = delete;
  shm_request& operator=(const shm_request&) = delete;
  ~shm_request();

  // True once the transfer finished; throws if it failed (mismatch, peer lost, abort).
  bool test();
  // Blocks until the transfer finished or `until` passed (timeout_error naming peer, tag and
  // bytes, and how many of them moved).
  void wait(deadline until);

 private:
  friend class shm_backend;
  shm_request(std::shared_ptr<detail::shm_state> state, std::shared_ptr<detail::shm_op> op)
      : state_(std::move(state)), op_(std::move(op)) {}
  void release() noexcept;

  std::shared_ptr<detail::shm_state> state_;
  std::shared_ptr<detail::shm_op> op_;
};

struct shm_options {
  // Timeout of the rendezvous. Unset: DISTCOMM_TIMEOUT (config::from_env().timeout).
  std::optional<std::chrono::duration<double>> timeout;
  // Bytes of each ordered pair's ring; 0: DISTCOMM_SHM_RING, else 1 MiB.
  std::size_t ring_bytes = 0;
  // Bytes per rank the collectives stage at a time (twice, double-buffered); 0:
  // DISTCOMM_SHM_CHUNK, else 512 KiB.
  std::size_t chunk_bytes = 0;
  // Whether the large collectives may read the peers' buffers straight from their processes
  // (taken only where every rank wants it and may: copy_path()). Unset: DISTCOMM_SHM_SINGLE_COPY
  // (off unless "on").
  std::optional<bool> single_copy;
  // Keys of this communicator live under `prefix/` in the store; empty: a fresh prefix from a
  // store counter, so several communicators on one store do not clash.
  std::string prefix;
};

class shm_backend {
 public:
  using request = shm_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits(
          "shm", "shared memory between the processes of one host, meeting through the job's store")
          .with(capability::processes | capability::store | capability::single_host |
                capability::split | capability::shrink | capability::grow)
          .default_rank(3);
  static constexpr const char* name = traits.name();
  // The collectives fold every rank's copy in rank order (core/reduce.hpp's fold), like
  // DistComm's deterministic mode: bit-identical to it and across strategies.
  static constexpr bool native_is_deterministic = true;
  // strategy::automatic's table on this backend: the collectives in shared memory at every size.
  // They copy each byte in and out once and read it once to reduce, where ring, tree and the
  // parameter server pass it through a ring buffer (two copies) at every hop.
  static constexpr const char* default_algo = "native:0-max";
  // Tensor Fusion packs tensors below 64 KiB only (the default is 1 MiB): a collective here costs
  // about 1 us, and packing copies each byte twice more through memory, which is what shm is
  // bound by (docs/PERFORMANCE.md, "Each backend's own defaults").
  static constexpr std::size_t default_fusion_cutoff = std::size_t{64} << 10;

  // Collective over the `size` ranks sharing `kv`, all on this host (checked: host name and boot
  // id): returns once every rank has mapped every segment and the names are unlinked.
  shm_backend(std::shared_ptr<store> kv, int rank, int size, shm_options opts = {});
  explicit shm_backend(const job& j, shm_options opts = {});

  // This rank of `given` (a job the program met itself), else of the job the launcher started
  // (shared_bootstrap); cfg.timeout.
  static shm_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  [[nodiscard]] shm_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] shm_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // A message from whichever rank sends on `tag` first; its rank goes to *source (backend.hpp).
  [[nodiscard]] shm_request irecv_any(void* data, std::size_t bytes, int* source, tag_t tag);
  // A small send nobody waits for (backend.hpp): copied at once, moved into the ring as this
  // rank's other requests progress; the destructor gives what is left 100 ms.
  void send_detached(const void* data, std::size_t bytes, int peer, tag_t tag);

  // Fails every pending and future wait with peer_lost_error(reason) and tells the peers, whose
  // waits fail at once with peer_lost_error("rank R aborted: <reason>").
  void abort(const std::string& reason) noexcept;

  // Collectives in shared memory; every dtype and op, avg included.
  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until);
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t, deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_alltoall(const void* in, void* out, std::size_t block_count, dtype t, deadline until);
  // Every rank's counts travel with its first chunk: each rank compares every pair and all raise
  // the same mismatch_error before anything is written (native_alltoallv_checks_counts).
  void native_alltoallv(const void* in, const std::size_t* send_counts,
                        const std::size_t* send_displs, void* out, const std::size_t* recv_counts,
                        const std::size_t* recv_displs, dtype t, deadline until);
  static constexpr bool native_alltoallv_checks_counts = true;
  void native_barrier(deadline until);
  // The ranks' agreement before each collective (DISTCOMM_MISMATCH_CHECK, check/agree.hpp)
  // through the segments: every rank's fingerprints merged into `state` at the cost of one
  // arrival, where the exchange over messages takes log2(p) rounds. native_leave() publishes a
  // destroyed communicator's notice in its place.
  void native_agree(check::agreement& state, const char* what, deadline until);
  void native_leave(const check::agreement& notice) noexcept;
  // The agreement carried by the next collective's first arrival instead of one of its own
  // (check::deferred_agreement): the fingerprints published with the data, one arrival fewer.
  void defer_agreement(check::deferred_agreement* d) noexcept;

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with segments of its own: split() and subset() of communicator.hpp. `name` is the same
  // on each member and unique among this backend's splits. Empty `members`: nothing.
  std::optional<shm_backend> split(const std::vector<int>& members, const std::string& name);

  // This backend's namespace of the job's store, the same on every member
  // (communicator::shrink agrees there on the survivors); invalid_argument_error when the store
  // is gone.
  std::shared_ptr<store> group_store() const;

  // How the large collectives move data, decided at start-up alike on every rank: "single copy
  // (process_vm_readv)", or "copy in/out" with the reason where single copy is not allowed.
  const std::string& copy_path() const;

 private:
  shm_request post_recv(void* data, std::size_t bytes, int peer, int* source, tag_t tag);

  std::shared_ptr<detail::shm_state> state_;
  int rank_ = 0;
  int size_ = 1;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::shm, not in each program that calls it.
any_communicator make_communicator(shm_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
