// The local backend: the ranks of a world are threads of one process. Used by the unit tests, by
// applications that drive several devices from threads, and as the reference transport.
// A message is copied once, directly from the sender's buffer into the receiver's, by whichever
// side arrives second. Native collectives read the other ranks' buffers through shared memory.
#pragma once

#include <cstddef>
#include <functional>
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
struct local_world_state;
struct local_op;
}  // namespace detail

// A pending send or receive. Move-only; destroying it while pending cancels it.
class [[nodiscard]] local_request {
 public:
  local_request() = default;  // an empty request is complete
  local_request(local_request&&) noexcept = default;
  local_request& operator=(local_request&& other) noexcept;
  local_request(const local_request&) = delete;
  local_request& operator=(const local_request&) = delete;
  ~local_request();

  // True once the transfer finished; throws if it failed (mismatch, abort).
  bool test();
  // Blocks until the transfer finished or `until` passed (timeout_error, request cancelled).
  void wait(deadline until);

 private:
  friend class local_backend;
  local_request(std::shared_ptr<detail::local_world_state> world,
                std::shared_ptr<detail::local_op> op) noexcept
      : world_(std::move(world)), op_(std::move(op)) {}
  void cancel() noexcept;

  std::shared_ptr<detail::local_world_state> world_;
  std::shared_ptr<detail::local_op> op_;
};

// One rank's handle on a local_world. Use each handle from one thread at a time.
class local_backend {
 public:
  using request = local_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits("local", "ranks are threads of one process, with shared-memory collectives")
          .with(capability::single_host | capability::split | capability::shrink)
          .default_rank(1);
  static constexpr const char* name = traits.name();
  // The shared-memory collectives reduce in rank order, like DistComm's deterministic mode.
  static constexpr bool native_is_deterministic = true;
  // strategy::automatic's table on this backend: the tree is fastest up to ~128 KiB, the
  // shared-memory native above (docs/PERFORMANCE.md, "The local backend's automatic table").
  static constexpr const char* default_algo = "tree:0-128K;native:128K-max";

  // A backend of the job the launcher started, or of `given`: as a process's backend it can
  // only be a world of one (its ranks are threads: local_world); invalid_argument_error naming
  // the backends that connect processes otherwise.
  static local_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept { return rank_; }
  int size() const noexcept;

  [[nodiscard]] local_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] local_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // A message of at most `capacity` bytes; its size goes to *got (backend.hpp).
  [[nodiscard]] local_request irecv_up_to(void* data, std::size_t capacity, std::size_t* got,
                                          int peer, tag_t tag);
  // A message from whichever rank sends on `tag` first; its rank goes to *source (backend.hpp).
  [[nodiscard]] local_request irecv_any(void* data, std::size_t bytes, int* source, tag_t tag);
  // A send nobody waits for (backend.hpp): the bytes are copied now and stay in the peer's
  // mailbox until it receives them or the world ends.
  void send_detached(const void* data, std::size_t bytes, int peer, tag_t tag);

  // Fails every pending and future wait of every rank with peer_lost_error naming this rank.
  void abort(const std::string& reason) noexcept;

  // Native collectives through shared memory (each rank reads the others' buffers).
  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until);
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t, deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_barrier(deadline until);

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with its own transport context, independent of this one: split() and subset() of
  // communicator.hpp. `name` is the same on each member and unique among this backend's splits.
  // An empty `members` (this rank joins no group) gives nothing.
  std::optional<local_backend> split(const std::vector<int>& members, const std::string& name);
  // A store the ranks of this world share (in this process), for their agreements through keys:
  // the survivors' in shrink() of communicator.hpp.
  std::shared_ptr<store> group_store() const;

 private:
  friend class local_world;
  local_backend(std::shared_ptr<detail::local_world_state> world, int rank) noexcept
      : world_(std::move(world)), rank_(rank) {}
  // Publishes (in, out), waits for all ranks, returns nothing; see local.cpp.
  void publish_and_sync(const void* in, void* out, const char* what, deadline until);
  void sync(const char* what, deadline until);
  std::shared_ptr<detail::local_op> post_send(const void* data, std::size_t bytes, int peer,
                                              tag_t tag, std::vector<unsigned char> owned);
  local_request post_recv(void* data, std::size_t bytes, std::size_t* got, int* source, int peer,
                          tag_t tag);

  std::shared_ptr<detail::local_world_state> world_;
  int rank_ = 0;
};

// A world of `size` ranks living in this process.
class local_world {
 public:
  explicit local_world(int size);

  int size() const noexcept;
  // The handle of rank r (0 <= r < size). Each rank's handle belongs to one thread.
  local_backend backend(int rank) const;

  // Runs body(backend(r)) on `size` threads and joins them. If a rank throws, the world is
  // aborted (so the other ranks fail fast instead of waiting for their deadline) and the first
  // exception is rethrown here after every thread has ended.
  void run(const std::function<void(local_backend)>& body) const;

 private:
  std::shared_ptr<detail::local_world_state> state_;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::local, not in each program that calls it.
any_communicator make_communicator(local_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
