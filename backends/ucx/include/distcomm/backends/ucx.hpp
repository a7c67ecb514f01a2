// The UCX backend: point-to-point over UCP's tag API, one worker per backend, progress driven by
// the thread that waits. Worker addresses are exchanged through DistComm's store; UCX picks the
// transports (shared memory on one host, TCP or RDMA across hosts; UCX_TLS still applies).
// No native collectives: strategies ring, tree, parameter_server and automatic run over it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "distcomm/backend.hpp"
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
  // Progresses until the transfer finished or `until` passed (timeout_error, request cancelled).
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
  bool poll();             // one check of the UCX request, no progress; frees it when done
  void cancel() noexcept;  // cancels and progresses until UCX released the request
  std::string describe() const;

  std::shared_ptr<detail::ucx_state> state_;
  void* handle_ = nullptr;  // the UCX request; null when complete
  kind kind_ = kind::send;
  int peer_ = -1;
  tag_t tag_ = 0;
  std::size_t bytes_ = 0;
};

// One rank's UCX endpoint set. Movable; use it from one thread at a time.
class ucx_backend {
 public:
  using request = ucx_request;
  static constexpr const char* name = "ucx";

  // Collective over the `size` ranks sharing `kv`: creates the UCP context and worker, publishes
  // the worker address under a prefix unique to this backend, and connects to every peer (the
  // exchange waits as long as the store's own timeout). `kv` must outlive the backend: its
  // destructor runs a final store barrier. `timeout` bounds closing the endpoints (at most 10 s).
  ucx_backend(store& kv, int rank, int size,
              std::chrono::duration<double> timeout = std::chrono::seconds(300));
  // From distcomm::bootstrap(); keeps j.kv alive. A one-rank job needs no store.
  explicit ucx_backend(const job& j,
                       std::chrono::duration<double> timeout = std::chrono::seconds(300));

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  [[nodiscard]] ucx_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] ucx_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);

  // Fails every pending and future wait with peer_lost_error(reason) and force-closes the
  // endpoints so the peers notice.
  void abort(const std::string& reason) noexcept;

 private:
  void check_peer(const char* what, int peer) const;

  std::shared_ptr<detail::ucx_state> state_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace distcomm
