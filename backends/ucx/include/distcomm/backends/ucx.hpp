// The UCX backend: point-to-point over UCP's tag API, one worker per backend, progress driven by
// the thread that waits. Worker addresses are exchanged through DistComm's store; UCX picks the
// transports (UCX_TLS still applies). No native collectives: strategies ring, tree,
// parameter_server and automatic run over it.
//
// Transports. Endpoints ask UCX for peer failure reports (UCP_ERR_HANDLING_MODE_PEER), so UCP
// only picks transports that can give them: TCP, RDMA, and shared memory where that UCX's
// shared-memory transports can report a dead peer. UCX 1.13 (Debian 12's) cannot: there even
// ranks on one host talk TCP over loopback. Without an RDMA device, the backend moves UCX's
// rendezvous threshold to 512 KiB (UCX_RNDV_THRESH, when set, wins): each rendezvous handshake
// costs a wait here.
//
// Progress and waiting. There is no progress thread: the worker advances only inside test(),
// wait(), the destruction of a pending request, the constructor (which ends with a zero-byte
// handshake with every peer, so all connections are up when it returns) and the destructor.
// wait() polls the worker while events arrive and, as soon as it is idle, arms it and sleeps on
// its event file descriptor (ucp_worker_arm, ppoll) until the next event, the deadline or 10 ms,
// whichever comes first; so ranks sharing cores give theirs to the peers they wait for instead
// of spinning, and every wait ends at its deadline. While a rank does not wait (computing, or
// inside the store) nothing progresses: eager sends complete locally, but a large (rendezvous)
// send completes only once the receiver waits.
//
// Peer failure. UCX reports a failed peer through the endpoint's error callback, run during
// progress; from then on every pending and future wait, isend and irecv involving that rank
// throws peer_lost_error naming it and UCX's reason ("Endpoint timeout", "Connection reset by
// remote peer"); other peers are unaffected. A wait names the peer it waits on: a rank stuck
// behind another (a ring neighbour of the failed rank) names that other rank, unless the abort
// notice of a rank that failed first (below) arrives before its own deadline.
//  * A killed peer (SIGKILL, crash): the kernel resets its TCP connections, which wakes a waiting
//    rank at once; on the development VM (UCX 1.13, 3 ranks) waits on a SIGKILLed rank failed
//    with peer_lost_error within milliseconds. Connectionless transports rely on UCP's
//    keepalive, which this backend runs every second unless UCX_KEEPALIVE_INTERVAL says
//    otherwise (UCX's default is 20 s). A rank notices only while it progresses, i.e. at its
//    next wait; a wait whose deadline comes first throws timeout_error.
//  * A stopped (SIGSTOP) or hung peer is alive for the operating system: nothing fails, and
//    waits on it throw timeout_error at their deadline, naming the peer rank, the tag and the
//    bytes. A large (rendezvous) transfer UCX cannot cancel gets 1 s more, then its endpoint
//    is force-closed: later calls to that rank throw peer_lost_error.
//  * abort(reason) first sends every peer a notice with the reason (at most 511 bytes, for at
//    most 100 ms), then force-closes this rank's endpoints. A peer that receives it fails every
//    pending and future wait, isend and irecv, whichever rank it is for, with peer_lost_error
//    "ucx: rank 2: rank 0 aborted: <reason>" (plus what rank 2 itself was waiting on), so the
//    rank that failed first is named. The notice is needed: a force close alone leaves the
//    TCP connection open until this rank's worker is destroyed.
//
// Teardown. The destructor meets the other ranks in a store barrier (progressing the worker
// meanwhile), then force-closes the endpoints. A rank that aborted, saw a peer fail, had a wait
// time out, or is unwinding an exception only marks its arrival and does not wait, so healthy
// peers pass at once and a failed rank never waits for a dead one.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

namespace detail {
struct ucx_state;
}  // namespace detail

// A pending tag send or receive. Move-only; it keeps its backend's worker alive. Destroying it
// while pending cancels it and returns once UCX no longer touches the buffer.
class [[nodiscard]] ucx_request {
 public:
  ucx_request() = default;  // an empty request is complete
  ucx_request(ucx_request&& other) noexcept;
  ucx_request& operator=(ucx_request&& other) noexcept;
  ucx_request(const ucx_request&) = delete;
  ucx_request& operator=(const ucx_request&) = delete;
  ~ucx_request();

  // Progresses the worker once; true once the transfer finished, throws if it failed
  // (mismatch_error, peer_lost_error, backend_error).
  bool test();
  // Progresses (sleeping while idle) until the transfer finished or `until` passed
  // (timeout_error, request cancelled); throws like test() if it failed.
  void wait(deadline until);

 private:
  friend class ucx_backend;
  enum class kind : unsigned char { send, recv };
  ucx_request(std::shared_ptr<detail::ucx_state> state, void* handle, kind k, int peer, tag_t tag,
              std::size_t bytes) noexcept
      : state_(std::move(state)),
        handle_(handle),
        kind_(k),
        peer_(peer),
        tag_(tag),
        bytes_(bytes) {}
  bool poll();                   // one check of the UCX request, no progress; frees it when done
  bool settled();                // poll(), then cancels and throws if the peer failed or we aborted
  void cancel() noexcept;        // cancels and progresses until UCX released the request
  std::string transfer() const;  // "send of 8 bytes to rank 1 (tag 3)"
  std::string describe() const;  // the same, after "ucx: "

  std::shared_ptr<detail::ucx_state> state_;
  void* handle_ = nullptr;  // the UCX request; null when complete
  kind kind_ = kind::send;
  int peer_ = -1;  // -1: a receive from any rank not complete yet (irecv_any)
  tag_t tag_ = 0;
  std::size_t bytes_ = 0;
  std::size_t* got_ = nullptr;  // irecv_up_to: where the message's size goes
  int* source_ = nullptr;       // irecv_any: where the sender's rank goes
};

// One rank's UCX endpoint set. Movable; use it from one thread at a time.
class ucx_backend {
 public:
  using request = ucx_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits("ucx", "UCX tag matching (TCP, RDMA), meeting through the job's store")
          .with(capability::processes | capability::store | capability::split | capability::shrink |
                capability::grow)
          .default_rank(5);
  static constexpr const char* name = traits.name();
  // strategy::automatic's table: recursive doubling while latency rules, the ring above
  // (docs/PERFORMANCE.md, "Each backend's own defaults").
  static constexpr const char* default_algo = "rd:0-16K;ring:16K-max";

  // Collective over the `size` ranks sharing `kv`: creates the UCP context and worker, publishes
  // the worker address under a prefix unique to this backend, connects to every peer and
  // exchanges a zero-byte handshake with each, for at most `timeout` (and the store's own
  // timeout). `kv` must outlive the backend: its destructor runs a final store barrier. `timeout`
  // also bounds closing the endpoints (at most 10 s). Unset: DISTCOMM_TIMEOUT
  // (config::from_env().timeout).
  ucx_backend(store& kv, int rank, int size,
              std::optional<std::chrono::duration<double>> timeout = std::nullopt);
  // From distcomm::bootstrap(); keeps j.kv alive. A one-rank job needs no store. `iface`: the
  // network interface, address or subnet UCX uses (as DISTCOMM_IFACE; UCX_NET_DEVICES, when set,
  // wins); empty: DISTCOMM_IFACE.
  explicit ucx_backend(const job& j,
                       std::optional<std::chrono::duration<double>> timeout = std::nullopt,
                       std::string iface = {});

  // This rank of `given` (a job the program met itself), else of the job the launcher started
  // (shared_bootstrap); cfg.timeout. A DISTCOMM_IFACE this host lacks is refused before the
  // ranks meet.
  static ucx_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  [[nodiscard]] ucx_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] ucx_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // A message of at most `capacity` bytes; its size goes to *got (backend.hpp).
  [[nodiscard]] ucx_request irecv_up_to(void* data, std::size_t capacity, std::size_t* got,
                                        int peer, tag_t tag);
  // A message from whichever rank's on `tag` UCP matches first (a receive whose tag mask leaves
  // out the sender); its rank goes to *source (backend.hpp).
  [[nodiscard]] ucx_request irecv_any(void* data, std::size_t bytes, int* source, tag_t tag);

  // Fails every pending and future wait with peer_lost_error(reason), sends every peer an abort
  // notice (their waits fail too, naming this rank and the reason) and force-closes the
  // endpoints.
  void abort(const std::string& reason) noexcept;

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with its own transport context, independent of this one: split() and subset() of
  // communicator.hpp. `name` is the same on each member and unique among this backend's splits.
  // An empty `members` (this rank joins no group) gives nothing.
  // Connects the members anew (a UCP context and worker of their own), under this backend's keys.
  std::optional<ucx_backend> split(const std::vector<int>& members, const std::string& name);

  // This backend's namespace of the job's store, the same on every member
  // (communicator::shrink agrees there on the survivors); invalid_argument_error when the store
  // is gone.
  std::shared_ptr<store> group_store() const;

 private:
  void check_peer(const char* what, int peer) const;
  ucx_request post_recv(void* data, std::size_t bytes, std::size_t* got, int* source, int peer,
                        tag_t tag);

  std::shared_ptr<detail::ucx_state> state_;
  int rank_ = 0;
  int size_ = 1;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::ucx, not in each program that calls it.
any_communicator make_communicator(ucx_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
