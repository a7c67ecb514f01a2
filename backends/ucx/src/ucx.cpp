// ucx_backend: UCP tag send/receive with peer error handling. Each rank's messages to a peer
// carry the UCP tag (source rank << 32 | DistComm tag) and are received with a full mask, so a
// receive matches exactly one (peer, tag) and UCP's in-order tag matching gives MPI's
// non-overtaking rule. Progress happens only inside test()/wait() and teardown (thread mode
// single: the backend is used from one thread at a time).
#include "distcomm/backends/ucx.hpp"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"

namespace distcomm {
namespace detail {

namespace {

// How long a destroyed, pending send may stay in flight before its endpoint is force-closed
// (UCP cannot cancel every send protocol; closing the endpoint completes them all).
constexpr std::chrono::seconds send_cancel_grace{1};
// A force close is local; this only bounds a misbehaving transport at teardown.
constexpr std::chrono::duration<double> close_limit{10.0};

std::string status_text(ucs_status_t st) { return ucs_status_string(st); }

[[noreturn]] void throw_status(const char* routine, ucs_status_t st) {
  throw backend_error("ucx", routine, static_cast<long>(st), status_text(st));
}

void check(const char* routine, ucs_status_t st) {
  if (st != UCS_OK) throw_status(routine, st);
}

// Statuses UCX reports when the other side is gone or its endpoint was closed.
bool is_peer_failure(ucs_status_t st) {
  switch (st) {
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
      return true;
    default:
      return false;
  }
}

ucp_tag_t make_tag(int source, tag_t tag) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(source)) << 32) | tag;
}
constexpr ucp_tag_t full_mask = ~ucp_tag_t{0};

}  // namespace

struct ucx_peer {
  int rank = -1;
  ucp_ep_h ep = nullptr;
  bool failed = false;
  std::string failure;
};

struct ucx_state {
  std::shared_ptr<store> kv;
  int rank = 0;
  int size = 1;
  std::chrono::duration<double> timeout{300.0};
  std::string prefix;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucx_peer> peers;  // sized once, so callback arguments stay valid
  bool connected = false;
  bool aborted = false;
  std::string abort_reason;

  ucx_state() = default;
  ucx_state(const ucx_state&) = delete;
  ucx_state& operator=(const ucx_state&) = delete;
  ~ucx_state() { teardown(); }

  static void on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t st) {
    auto* p = static_cast<ucx_peer*>(arg);
    if (!p->failed) {
      p->failed = true;
      p->failure = status_text(st);
    }
  }

  // Polls the worker; yields the core when nothing happened, so ranks oversubscribing the cores
  // (several ranks per core in tests and on small hosts) let their peers run.
  void progress() {
    if (ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }

  // Progresses until `req` (a UCX request or status pointer) completes or `until` passes; frees
  // it when it completed. Returns false on timeout (the request is then left to UCX).
  bool drive(ucs_status_ptr_t req, deadline until) {
    if (req == nullptr || UCS_PTR_IS_ERR(req)) return true;
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
      if (clock::now() > until) {
        ucp_request_free(req);
        return false;
      }
      progress();
    }
    ucp_request_free(req);
    return true;
  }

  // Starts closing every endpoint (force: without flushing) and progresses until all closed.
  void close_endpoints(bool force, deadline until) {
    std::vector<ucs_status_ptr_t> pending;
    for (ucx_peer& p : peers) {
      if (p.ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = (force || p.failed) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      pending.push_back(ucp_ep_close_nbx(p.ep, &param));
      p.ep = nullptr;
    }
    for (ucs_status_ptr_t r : pending) drive(r, until);
  }

  bool any_failed() const {
    for (const ucx_peer& p : peers) {
      if (p.failed) return true;
    }
    return false;
  }

  void teardown() noexcept {
    if (worker != nullptr) {
      // Nobody closes an endpoint while a peer may still be sending on it: a barrier first
      // (skipped after a failure, when some peer may never arrive, and when an exception unwinds:
      // a failed rank must not wait for peers that may be waiting on it). Past the barrier every
      // rank has completed every receive, so no message is in flight and the endpoints are
      // force-closed: a flushing close needs the peers to progress, and they sit in the store.
      const bool healthy =
          connected && !aborted && !any_failed() && size > 1 && std::uncaught_exceptions() == 0;
      if (healthy) {
        try {
          store_barrier(*kv, prefix + "close", rank, size);
        } catch (...) {
        }
      }
      close_endpoints(true, deadline_after(std::min(timeout, close_limit)));
      ucp_worker_destroy(worker);
      worker = nullptr;
    }
    if (context != nullptr) {
      ucp_cleanup(context);
      context = nullptr;
    }
  }

  void connect() {
    ucp_config_t* config = nullptr;
    check("ucp_config_read", ucp_config_read(nullptr, nullptr, &config));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    const ucs_status_t st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check("ucp_init", st);

    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    check("ucp_worker_create", ucp_worker_create(context, &wparams, &worker));

    peers.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) peers[static_cast<std::size_t>(r)].rank = r;
    if (size == 1) {
      connected = true;
      return;
    }

    // Every backend built on this store gets its own prefix: ranks build backends in the same
    // order, so each rank's own counter names the same instance.
    const std::int64_t seq = kv->add("distcomm/ucx/seq/" + std::to_string(rank), 1);
    prefix = "distcomm/ucx/" + std::to_string(seq) + "/";

    ucp_address_t* address = nullptr;
    std::size_t address_length = 0;
    check("ucp_worker_get_address", ucp_worker_get_address(worker, &address, &address_length));
    const auto* first = reinterpret_cast<const std::uint8_t*>(address);
    bytes mine(first, first + address_length);
    ucp_worker_release_address(worker, address);
    kv->set(prefix + "addr/" + std::to_string(rank), mine);

    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      const bytes theirs = kv->get(prefix + "addr/" + std::to_string(r));
      ucx_peer& p = peers[static_cast<std::size_t>(r)];
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &ucx_state::on_ep_error;
      ep.err_handler.arg = &p;
      const ucs_status_t es = ucp_ep_create(worker, &ep, &p.ep);
      if (es != UCS_OK) {
        throw backend_error("ucx", "ucp_ep_create", static_cast<long>(es),
                            "connecting to rank " + std::to_string(r) + ": " + status_text(es));
      }
    }
    connected = true;
  }
};

}  // namespace detail

// ---- ucx_request ------------------------------------------------------------------------------

ucx_request::ucx_request(ucx_request&& other) noexcept
    : state_(std::move(other.state_)),
      handle_(std::exchange(other.handle_, nullptr)),
      kind_(other.kind_),
      peer_(other.peer_),
      tag_(other.tag_),
      bytes_(other.bytes_) {}

ucx_request& ucx_request::operator=(ucx_request&& other) noexcept {
  if (this != &other) {
    cancel();
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, nullptr);
    kind_ = other.kind_;
    peer_ = other.peer_;
    tag_ = other.tag_;
    bytes_ = other.bytes_;
  }
  return *this;
}

ucx_request::~ucx_request() { cancel(); }

std::string ucx_request::describe() const {
  return std::string("ucx: ") + (kind_ == kind::send ? "send of " : "receive of ") +
         std::to_string(bytes_) + " bytes " + (kind_ == kind::send ? "to" : "from") + " rank " +
         std::to_string(peer_) + " (tag " + std::to_string(tag_) + ")";
}

void ucx_request::cancel() noexcept {
  if (handle_ == nullptr) return;
  detail::ucx_state& s = *state_;
  ucp_request_cancel(s.worker, handle_);
  const deadline grace = clock::now() + detail::send_cancel_grace;
  bool closed = false;
  while (ucp_request_check_status(handle_) == UCS_INPROGRESS) {
    if (!closed && clock::now() > grace) {
      // A send UCP could not cancel (rendezvous in flight): closing the endpoint completes it.
      detail::ucx_peer& p = s.peers[static_cast<std::size_t>(peer_)];
      if (!p.failed) {
        p.failed = true;
        p.failure = "its endpoint was closed to cancel a pending send";
      }
      if (p.ep != nullptr) {
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
        p.ep = nullptr;
        s.drive(r, deadline::max());
      }
      closed = true;
    }
    s.progress();
  }
  ucp_request_free(handle_);
  handle_ = nullptr;
}

bool ucx_request::poll() {
  detail::ucx_state& s = *state_;
  ucs_status_t st;
  std::size_t received = bytes_;
  if (kind_ == kind::recv) {
    ucp_tag_recv_info_t info{};
    st = ucp_tag_recv_request_test(handle_, &info);
    if (st == UCS_INPROGRESS) return false;
    received = info.length;
  } else {
    st = ucp_request_check_status(handle_);
    if (st == UCS_INPROGRESS) return false;
  }
  ucp_request_free(handle_);
  handle_ = nullptr;
  if (s.aborted) throw peer_lost_error(s.abort_reason);
  if (st == UCS_ERR_MESSAGE_TRUNCATED) {
    throw mismatch_error(describe() + ": the matching send is larger (sizes differ across ranks)");
  }
  if (st != UCS_OK) {
    const detail::ucx_peer& p = s.peers[static_cast<std::size_t>(peer_)];
    if (p.failed || detail::is_peer_failure(st)) {
      throw peer_lost_error(describe() + " failed: peer rank " + std::to_string(peer_) + " lost (" +
                            (p.failed ? p.failure : detail::status_text(st)) + ")");
    }
    throw backend_error("ucx", kind_ == kind::send ? "ucp_tag_send_nbx" : "ucp_tag_recv_nbx",
                        static_cast<long>(st), describe() + ": " + detail::status_text(st));
  }
  if (received != bytes_) {
    throw mismatch_error(describe() + ": the matching send has " + std::to_string(received) +
                         " bytes (sizes differ across ranks)");
  }
  return true;
}

bool ucx_request::test() {
  if (handle_ == nullptr) return true;
  state_->progress();
  if (poll()) return true;
  const detail::ucx_state& s = *state_;
  if (s.aborted) {
    cancel();
    throw peer_lost_error(s.abort_reason);
  }
  const detail::ucx_peer& p = s.peers[static_cast<std::size_t>(peer_)];
  if (p.failed) {
    const std::string why = p.failure;
    cancel();
    throw peer_lost_error(describe() + " failed: peer rank " + std::to_string(peer_) + " lost (" +
                          why + ")");
  }
  return false;
}

void ucx_request::wait(deadline until) {
  if (handle_ == nullptr) return;
  while (!test()) {
    if (clock::now() > until) {
      const std::string what = describe();
      cancel();
      throw timeout_error(what + " timed out: rank " + std::to_string(peer_) +
                          " did not complete it before the deadline (DISTCOMM_TIMEOUT)");
    }
  }
}

// ---- ucx_backend ------------------------------------------------------------------------------

ucx_backend::ucx_backend(store& kv, int rank, int size, std::chrono::duration<double> timeout)
    : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw invalid_argument_error("ucx_backend: rank " + std::to_string(rank) +
                                 " is not below world size " + std::to_string(size));
  }
  state_ = std::make_shared<detail::ucx_state>();
  state_->kv = std::shared_ptr<store>(&kv, [](store*) {});  // the caller keeps it alive
  state_->rank = rank;
  state_->size = size;
  state_->timeout = timeout;
  state_->connect();
}

ucx_backend::ucx_backend(const job& j, std::chrono::duration<double> timeout)
    : rank_(j.world.rank), size_(j.world.size) {
  if (size_ > 1 && j.kv == nullptr) {
    throw invalid_argument_error("ucx_backend: a job of " + std::to_string(size_) +
                                 " ranks needs its store (job.kv is null)");
  }
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw invalid_argument_error("ucx_backend: rank " + std::to_string(rank_) +
                                 " is not below world size " + std::to_string(size_));
  }
  state_ = std::make_shared<detail::ucx_state>();
  state_->kv = j.kv;
  state_->rank = rank_;
  state_->size = size_;
  state_->timeout = timeout;
  state_->connect();
}

void ucx_backend::check_peer(const char* what, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error(std::string("ucx: ") + what + ": peer " + std::to_string(peer) +
                                 " is not another rank of this world (rank " +
                                 std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  }
  if (state_->aborted) throw peer_lost_error(state_->abort_reason);
  const detail::ucx_peer& p = state_->peers[static_cast<std::size_t>(peer)];
  if (p.failed || p.ep == nullptr) {
    throw peer_lost_error(std::string("ucx: ") + what + " to/from rank " + std::to_string(peer) +
                          ": peer lost (" + p.failure + ")");
  }
}

ucx_request ucx_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  check_peer("isend", peer);
  static const unsigned char empty = 0;
  ucp_request_param_t param{};  // contiguous bytes, no callback: completion is polled
  const ucs_status_ptr_t r =
      ucp_tag_send_nbx(state_->peers[static_cast<std::size_t>(peer)].ep, bytes == 0 ? &empty : data,
                       bytes, detail::make_tag(rank_, tag), &param);
  if (r == nullptr) return ucx_request{};  // completed in place
  ucx_request req(state_, nullptr, ucx_request::kind::send, peer, tag, bytes);
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t st = UCS_PTR_STATUS(r);
    if (detail::is_peer_failure(st)) {
      throw peer_lost_error(req.describe() + " failed: peer rank " + std::to_string(peer) +
                            " lost (" + detail::status_text(st) + ")");
    }
    throw backend_error("ucx", "ucp_tag_send_nbx", static_cast<long>(st),
                        req.describe() + ": " + detail::status_text(st));
  }
  req.handle_ = r;
  return req;
}

ucx_request ucx_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  check_peer("irecv", peer);
  static unsigned char empty = 0;
  // Always a request (no in-place completion): its length is then read back reliably through
  // ucp_tag_recv_request_test, the one place every size check happens.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  const ucs_status_ptr_t r =
      ucp_tag_recv_nbx(state_->worker, bytes == 0 ? &empty : data, bytes,
                       detail::make_tag(peer, tag), detail::full_mask, &param);
  ucx_request req(state_, nullptr, ucx_request::kind::recv, peer, tag, bytes);
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t st = UCS_PTR_STATUS(r);
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
      throw mismatch_error(req.describe() +
                           ": the matching send is larger (sizes differ across ranks)");
    }
    throw backend_error("ucx", "ucp_tag_recv_nbx", static_cast<long>(st),
                        req.describe() + ": " + detail::status_text(st));
  }
  if (r == nullptr) return ucx_request{};  // not expected with NO_IMM_CMPL; nothing to wait for
  req.handle_ = r;
  return req;
}

void ucx_backend::abort(const std::string& reason) noexcept {
  if (!state_ || state_->aborted) return;
  try {
    state_->abort_reason = "ucx: rank " + std::to_string(rank_) + " aborted: " + reason;
  } catch (...) {
  }
  state_->aborted = true;
  // Force-close (no flush, bounded) so the peers' endpoints fail instead of waiting on us.
  state_->close_endpoints(true, deadline_after(std::chrono::seconds(5)));
}

}  // namespace distcomm
