// The gloo backend: point-to-point messages over gloo's TCP transport (unbound buffers), gloo's
// own allreduce/broadcast/barrier as the native collectives, bootstrapped through DistComm's
// key-value store. gloo's headers stay out of this one; the backend is a handle on shared state.
// Interface: DISTCOMM_IFACE (a host name or address to bind), else 127.0.0.1 for a one-node
// world, else this host's name.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

namespace detail {
struct gloo_state;
struct gloo_op;
}  // namespace detail

// A pending send or receive; a send of at most 16 KiB is complete at once (the backend sends a
// copy). Move-only; destroying it while pending cancels it: a receive that no message matched yet
// is retracted (the next receive of its peer and tag gets that message); a large send, or a
// matched receive whose payload is arriving, is waited for up to 1 s (not after a failure), then
// the connection to that peer is closed. Either way the caller's buffer is untouched once the
// destructor returns.
class [[nodiscard]] gloo_request {
 public:
  gloo_request() = default;  // an empty request is complete
  gloo_request(gloo_request&&) noexcept = default;
  gloo_request& operator=(gloo_request&& other) noexcept;
  gloo_request(const gloo_request&) = delete;
  gloo_request& operator=(const gloo_request&) = delete;
  ~gloo_request();

  // True once the transfer finished; throws if it failed (mismatch, peer lost, abort).
  bool test();
  // Blocks until the transfer finished or `until` passed: timeout_error naming peer, tag and
  // bytes and, when that peer is waiting itself, what it waits for, and so on to the rank that
  // does not answer (asking adds at most 0.25 s, and a round trip per rank that answers).
  void wait(deadline until);

 private:
  friend class gloo_backend;
  gloo_request(std::shared_ptr<detail::gloo_state> state, std::shared_ptr<detail::gloo_op> op)
      : state_(std::move(state)), op_(std::move(op)) {}
  void release() noexcept;

  std::shared_ptr<detail::gloo_state> state_;
  std::shared_ptr<detail::gloo_op> op_;
};

struct gloo_options {
  // Timeout of the rendezvous (address exchange, connecting; the store's own timeout, when
  // shorter, also applies) and of gloo's own operations. Unset: DISTCOMM_TIMEOUT
  // (config::from_env().timeout) when the backend is built.
  std::optional<std::chrono::duration<double>> timeout;
  // Host name or address the TCP device binds; empty: DISTCOMM_IFACE, else as described above.
  std::string hostname;
  // Keys of this communicator live under `prefix/` in the store; empty: a fresh prefix from a
  // store counter, so several communicators on one store do not clash.
  std::string prefix;
  // The world has every rank on this node (loopback is enough).
  bool single_node = true;
};

class gloo_backend {
 public:
  using request = gloo_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits("gloo", "gloo's TCP transport, meeting through the job's store")
          .with(capability::processes | capability::store | capability::split | capability::shrink |
                capability::grow)
          .across_hosts("rd:0-16K;tree:16K-64K;ring:64K-1M;native:1M-max")
          .default_rank(4);
  static constexpr const char* name = traits.name();
  // gloo's ring reduces in an order that depends on the rank, so results may differ in the last
  // bit between strategies (never between ranks).
  static constexpr bool native_is_deterministic = false;
  // Tensor Fusion packs tensors below 4 MiB (the default is 1 MiB): a collective costs 0.5-1 ms
  // here whatever its size, more than copying a few MiB twice (docs/PERFORMANCE.md, "The fusion
  // cutoff").
  static constexpr std::size_t default_fusion_cutoff = std::size_t{4} << 20;
  // Ring, tree and parameter server send segments of 1 MiB here (the default is 256 KiB): each
  // gloo transfer is a rendezvous of notifications and wake-ups (docs/PERFORMANCE.md, "Each
  // backend's own defaults").
  static constexpr std::size_t default_segment_bytes = std::size_t{1} << 20;

  // Collective over the `size` ranks sharing `kv`: returns once every rank is connected to every
  // other (a store barrier), so a backend can be dropped unused without failing a slower peer.
  gloo_backend(std::shared_ptr<store> kv, int rank, int size, gloo_options opts = {});
  // From bootstrap()'s result; the world's single_node decides the default interface.
  explicit gloo_backend(const job& j, gloo_options opts = {});

  // This rank of `given` (a job the program met itself), else of the job the launcher started
  // (shared_bootstrap); cfg.timeout. A wrong DISTCOMM_IFACE is refused before the ranks meet, so
  // that every rank says why.
  static gloo_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  [[nodiscard]] gloo_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] gloo_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // A message of at most `capacity` bytes; its size goes to *got (backend.hpp).
  // A message from whichever rank's on `tag` is matched first; its rank goes to *source
  // (backend.hpp). Matched when this rank polls, per channel: among messages that arrived
  // between two polls, the lowest rank's.
  [[nodiscard]] gloo_request irecv_any(void* data, std::size_t bytes, int* source, tag_t tag);
  [[nodiscard]] gloo_request irecv_up_to(void* data, std::size_t capacity, std::size_t* got,
                                         int peer, tag_t tag);
  // A small send nobody waits for (backend.hpp): copied at once; teardown gives it 100 ms to be
  // taken, where a normal small send gets DISTCOMM_TIMEOUT.
  void send_detached(const void* data, std::size_t bytes, int peer, tag_t tag);

  // Fails every pending and future wait with peer_lost_error(reason), sends `reason` to every
  // peer (at most 0.1 s) and closes the connections: the peers' waits on this rank fail at once
  // with peer_lost_error("rank R aborted: <reason>"). A peer whose connection closes without such
  // a notice is reported as exited, killed or crashed.
  void abort(const std::string& reason) noexcept;

  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_barrier(deadline until);

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with its own transport context, independent of this one: split() and subset() of
  // communicator.hpp. `name` is the same on each member and unique among this backend's splits.
  // An empty `members` (this rank joins no group) gives nothing.
  // Connects the members anew, under this backend's keys in the store.
  std::optional<gloo_backend> split(const std::vector<int>& members, const std::string& name);

  // This backend's namespace of the job's store, the same on every member
  // (communicator::shrink agrees there on the survivors); invalid_argument_error when the store
  // is gone.
  std::shared_ptr<store> group_store() const;

 private:
  gloo_request send(const void* data, std::size_t bytes, int peer, tag_t tag, bool notice);
  std::shared_ptr<detail::gloo_state> state_;
  int rank_ = 0;
  int size_ = 1;
};

// Throws invalid_argument_error, naming this host's interfaces, when the interface or address to
// bind (opts.hostname, else DISTCOMM_IFACE) is neither an interface of this host nor a name it
// resolves; nothing when neither is set. The constructor checks this too; a launcher-started
// rank can check it before it meets the others (make_gloo does), so that every rank says why.
void check_interface(const gloo_options& opts = {});

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::gloo, not in each program that calls it.
any_communicator make_communicator(gloo_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
