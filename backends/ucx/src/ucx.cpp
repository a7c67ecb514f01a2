// ucx_backend: UCP tag send/receive with peer error handling. Each rank's messages to a peer
// carry the UCP tag (source rank << 32 | DistComm tag) and are received with a full mask, so a
// receive matches exactly one (peer, tag) and UCP's in-order tag matching gives MPI's
// non-overtaking rule. Progress happens only inside the constructor, test()/wait(),
// cancellation and teardown (thread mode single: the backend is used from one thread at a
// time); how waits progress and sleep, and how a dead peer is noticed, is described in ucx.hpp.
#include "distcomm/backends/ucx.hpp"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/rendezvous/interface.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"

namespace distcomm {
namespace detail {

namespace {

// How long a destroyed, pending request may stay in flight before its endpoint is force-closed
// (UCP cannot cancel a rendezvous transfer once it started; closing the endpoint completes it).
constexpr std::chrono::seconds cancel_grace{1};
// A force close is local; this only bounds a misbehaving transport at teardown.
constexpr std::chrono::duration<double> close_limit{10.0};

// The longest single sleep: waits still run UCP's keepalive (which lives in progress) and check
// their deadline at least this often, and an event a transport fails to signal costs at most this.
constexpr std::chrono::milliseconds max_sleep{10};
// The close barrier polls the store at most this often (it starts at 0.5 ms and doubles).
constexpr std::chrono::milliseconds max_barrier_pause{50};
// UCP's keepalive is what notices a dead peer on a transport without a connection for the
// kernel to reset (shared memory, on UCX versions that report peer failure there). UCX's own
// default of 20 s would outlast most deadlines; the check (is the process still there, can the
// connection still carry a message) costs next to nothing and never fails for a peer that is
// only slow or stopped. UCX_KEEPALIVE_INTERVAL, when set, wins.
constexpr const char* keepalive_interval = "1s";
// Where no RDMA device is present every transport UCX can pick is TCP (or shared memory), and its
// rendezvous protocol costs this backend a wait per handshake: UCX's own threshold ("auto", 16-32
// KiB over TCP here) made a 128 KiB ring allreduce between 2 ranks take 189-286 us against 44-103
// with this one, and a 32 KiB carried exchange 115-120 against 24-41, no size up to 32 MiB slower
// (distcomm-bench-ucx, 3 interleaved rounds, 2026-11-28 22:27 UTC). Above it the ring's 256 KiB
// segments still go eagerly. With an RDMA device, rendezvous is zero-copy and UCX's choice stays.
// UCX_RNDV_THRESH, when set, wins.
constexpr const char* tcp_rndv_thresh = "512K";

// True where this host has an RDMA device (InfiniBand, RoCE, iWARP: /sys/class/infiniband).
bool has_rdma_device() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

std::string status_text(ucs_status_t st) { return ucs_status_string(st); }

[[noreturn]] void throw_status(const char* routine, ucs_status_t st) {
  throw backend_error(ucx_backend::name, routine, static_cast<long>(st), status_text(st));
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
// A user message from any rank: the sender's bits left out, not the top bit (below).
constexpr ucp_tag_t any_source_mask = (ucp_tag_t{1} << 63) | 0xffffffffu;
int source_of(ucp_tag_t t) { return static_cast<int>((t >> 32) & 0x7fffffffu); }
// The backend's own messages set the top bit, which no user message does (ranks are below
// 2^31): the connection handshake and the abort notice.
ucp_tag_t handshake_tag(int source) { return make_tag(source, 0) | (ucp_tag_t{1} << 63); }
ucp_tag_t notice_tag(int source) { return make_tag(source, 1) | (ucp_tag_t{1} << 63); }
// An abort notice carries at most this many bytes of the reason (NUL-terminated).
constexpr std::size_t notice_bytes = 512;
// How long abort() lets its notices leave before closing the endpoints: a healthy peer's socket
// takes one at once; a stopped peer must not hold up the abort.
constexpr std::chrono::milliseconds notice_send_limit{100};

}  // namespace

struct ucx_state;

struct ucx_peer {
  ucx_state* owner = nullptr;
  int rank = -1;
  ucp_ep_h ep = nullptr;
  bool failed = false;
  std::string failure;
  void* notice_req = nullptr;  // the posted receive for this peer's abort notice
  std::array<char, notice_bytes> notice{};

  // The first failure is the one kept (a text that could not be allocated stays empty; the peer
  // still counts as failed).
  void fail(const char* why) noexcept {
    if (failed) return;
    failed = true;
    try {
      failure = why;
    } catch (...) {
    }
  }
};

struct ucx_state {
  std::shared_ptr<store> kv;
  int rank = 0;
  int size = 1;
  std::chrono::duration<double> timeout{300.0};
  std::string prefix;
  std::string iface;  // as DISTCOMM_IFACE; empty: DISTCOMM_IFACE itself
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;            // the worker's, signalled by every transport (UCP_FEATURE_WAKEUP)
  std::vector<ucx_peer> peers;  // sized once, so callback arguments stay valid
  bool connected = false;
  bool aborted = false;
  bool timed_out = false;  // a wait passed its deadline: some peer may be stopped or hung
  int noticed = -1;        // the first peer whose abort notice arrived
  std::string abort_reason;
  std::string notice_out;  // what abort() sent; UCX may still read it

  ucx_state() = default;
  ucx_state(const ucx_state&) = delete;
  ucx_state& operator=(const ucx_state&) = delete;
  ~ucx_state() { teardown(); }

  // UCX callbacks: no exception may cross back into UCX, hence the catch-alls (a failure text
  // that could not be allocated stays empty; the peer still counts as failed).
  static void on_ep_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t st) noexcept {
    static_cast<ucx_peer*>(arg)->fail(ucs_status_string(st));
  }

  // Runs in progress when a peer's abort notice arrives (or its receive is cancelled).
  static void on_notice(void* request, ucs_status_t st, const ucp_tag_recv_info_t* info,
                        void* arg) noexcept {
    auto* p = static_cast<ucx_peer*>(arg);
    ucp_request_free(request);
    p->notice_req = nullptr;
    if (st != UCS_OK) return;
    p->notice[std::min(info->length, p->notice.size() - 1)] = '\0';
    p->failed = true;
    if (p->owner->noticed < 0) p->owner->noticed = p->rank;
    try {
      p->failure = "it aborted: " + std::string(p->notice.data());
    } catch (...) {
    }
  }

  // "rank P aborted: <its reason>", for the first peer whose notice arrived.
  std::string notice_text() const {
    const ucx_peer& p = peers[static_cast<std::size_t>(noticed)];
    return "rank " + std::to_string(p.rank) + " aborted: " + p.notice.data();
  }

  // Posts one receive per peer for its abort notice; on_notice marks the peer failed.
  void post_notices() {
    for (ucx_peer& p : peers) {
      if (p.rank == rank) continue;
      ucp_request_param_t param{};
      param.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      param.cb.recv = &ucx_state::on_notice;
      param.user_data = &p;
      const ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, p.notice.data(), p.notice.size() - 1,
                                                  notice_tag(p.rank), full_mask, &param);
      if (UCS_PTR_IS_ERR(r)) throw_status("ucp_tag_recv_nbx (abort notice)", UCS_PTR_STATUS(r));
      p.notice_req = r;
    }
  }

  // Cancels the notice receives still posted; their callbacks release them.
  void cancel_notices() noexcept {
    for (ucx_peer& p : peers) {
      if (p.notice_req != nullptr) ucp_request_cancel(worker, p.notice_req);
    }
    const auto released = [&] {
      for (const ucx_peer& p : peers) {
        if (p.notice_req != nullptr) return false;
      }
      return true;
    };
    progress_until(released, deadline_after(close_limit));
  }

  // Receives and drops the messages nobody received (the notices of a communicator that left,
  // to ranks that were done too: check/agree.hpp), so that destroying the worker does not warn
  // about each of them. Called past the closing barrier, when nothing else is on its way.
  void drain_unexpected() noexcept {
    std::vector<unsigned char> sink;
    for (int i = 0; i < 4096; ++i) {
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker, 0, 0, 1, &info);
      if (msg == nullptr) return;
      sink.resize(std::max<std::size_t>(info.length, 1));
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
      param.datatype = ucp_dt_make_contig(1);
      if (!drive(ucp_tag_msg_recv_nbx(worker, sink.data(), info.length, msg, &param),
                 deadline_after(close_limit))) {
        return;
      }
    }
  }

  // Sends `reason` to every reachable peer and lets the notices leave (at most
  // notice_send_limit): flushed endpoints have handed them to the transport, so the force close
  // that follows does not drop them.
  void send_notices() noexcept {
    std::vector<ucs_status_ptr_t> pending;
    for (ucx_peer& p : peers) {
      if (p.ep == nullptr || p.failed) continue;
      ucp_request_param_t param{};
      pending.push_back(
          ucp_tag_send_nbx(p.ep, notice_out.c_str(), notice_out.size(), notice_tag(rank), &param));
    }
    const deadline until = clock::now() + notice_send_limit;
    for (ucs_status_ptr_t r : pending) drive(r, until);
    pending.clear();
    for (ucx_peer& p : peers) {
      if (p.ep == nullptr || p.failed) continue;
      ucp_request_param_t param{};
      pending.push_back(ucp_ep_flush_nbx(p.ep, &param));
    }
    for (ucs_status_ptr_t r : pending) drive(r, until);
  }

  // One poll of the worker for test(); yields the core when nothing happened, so a caller
  // looping on test() lets an oversubscribed peer run.
  void progress_once() {
    if (worker == nullptr || ucp_worker_progress(worker) == 0) std::this_thread::yield();
  }

  // Sleeps until the worker's event fd fires, at most max_sleep and never past `until`. Arming
  // fails with UCS_ERR_BUSY when events arrived since the last poll: then it returns at once.
  void sleep_on_events(deadline until) noexcept {
    const ucs_status_t armed = ucp_worker_arm(worker);
    if (armed == UCS_ERR_BUSY) return;
    if (armed != UCS_OK) {  // not expected with UCP_FEATURE_WAKEUP; at least let a peer run
      std::this_thread::yield();
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - clock::now());
    const std::chrono::nanoseconds nap = std::min<std::chrono::nanoseconds>(left, max_sleep);
    if (nap.count() <= 0) return;
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(nap.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(nap.count() % 1000000000);
    pollfd pfd{};
    pfd.fd = event_fd;
    pfd.events = POLLIN;
    // EINTR or an error simply ends this nap; the caller progresses and decides again.
    (void)::ppoll(&pfd, 1, &ts, nullptr);
  }

  // Progresses the worker until done() or `until` passed; returns whether done() held. Polls
  // while events keep coming and sleeps on the event fd as soon as the worker is idle, so ranks
  // sharing cores hand theirs to the peer they wait for. No spinning first: measured on the
  // 2-core development VM under load (load average 8), a ring allreduce of 8 B to 32 KB between
  // 2 ranks took 21-84 us sleeping at once, 42-135 us after spinning 10 us, 62-306 us after 20,
  // 174-951 us after 50 and 0.75-10 ms after 200 (distcomm-bench-ucx, 3 interleaved runs). On
  // this UCX the transport is TCP anyway (see ucx.hpp): the message wakes us through the kernel.
  // done() may throw.
  template <class Done>
  bool progress_until(Done&& done, deadline until) {
    for (;;) {
      if (done()) return true;
      if (worker == nullptr) return false;  // retired (below): nothing can progress any more
      if (ucp_worker_progress(worker) != 0) continue;
      if (done()) return true;
      if (clock::now() > until) return false;
      sleep_on_events(until);
    }
  }

  // Progresses until `req` (a UCX request or status pointer) completes or `until` passes, then
  // frees it (UCX releases a request freed while pending once it completes). False on timeout.
  bool drive(ucs_status_ptr_t req, deadline until) noexcept {
    if (req == nullptr || UCS_PTR_IS_ERR(req)) return true;
    const bool done =
        progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; }, until);
    ucp_request_free(req);
    return done;
  }

  // Force-closes (no flush) the endpoint to `peer`, if open, and waits for the close.
  void close_endpoint(ucx_peer& p, deadline until) noexcept {
    if (p.ep == nullptr) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(p.ep, &param);
    p.ep = nullptr;
    drive(r, until);
  }

  // Starts force-closing every endpoint at once, then progresses until all closed.
  void close_endpoints(deadline until) noexcept {
    std::vector<ucs_status_ptr_t> pending;
    for (ucx_peer& p : peers) {
      if (p.ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      pending.push_back(ucp_ep_close_nbx(p.ep, &param));
      p.ep = nullptr;
    }
    for (ucs_status_ptr_t r : pending) drive(r, until);
  }

  // The last resort of a cancel that closing endpoints did not end: UCX still owns the caller's
  // buffer (a rendezvous receive it matched, which this UCX does not purge from a force-closed
  // endpoint), and returning would let it write there after the caller freed it. The worker
  // goes, and every request with it, so nothing of this backend touches the buffer again; every
  // later call raises peer_lost_error with `reason`. Better than aborting the process: the
  // survivor can still report, and shrink onto a new communicator.
  void retire_worker(const std::string& reason) noexcept {
    if (worker == nullptr) return;
    if (!aborted) {
      try {
        abort_reason = reason;
      } catch (...) {
      }
      aborted = true;
    }
    for (ucx_peer& p : peers) {
      p.fail(reason.c_str());
      p.notice_req = nullptr;  // released with the worker
    }
    if (kv) kv->mark_job_failed();
    close_endpoints(clock::now());
    ucp_worker_destroy(worker);
    worker = nullptr;
  }

  bool any_failed() const {
    for (const ucx_peer& p : peers) {
      if (p.failed) return true;
    }
    return false;
  }

  // The barrier before closing: this rank arrives; with `wait`, it also waits until every rank
  // arrived, a peer failed or the store's timeout passed. Unlike store_barrier it progresses
  // the worker while waiting, so a peer still finishing a protocol step with this rank (the
  // last acknowledgement of a rendezvous send) is served, and a peer that dies is noticed.
  void close_barrier(bool wait) noexcept {
    try {
      const std::string name = prefix + "close/";
      kv->set(name + std::to_string(rank), bytes{1});
      if (!wait) return;
      std::vector<std::string> keys;
      for (int r = 0; r < size; ++r) keys.push_back(name + std::to_string(r));
      const deadline until = deadline_after(kv->timeout());
      std::chrono::microseconds pause{500};
      while (!kv->check(keys)) {
        if (any_failed() || clock::now() > until) return;
        progress_until([&] { return any_failed(); }, std::min(until, clock::now() + pause));
        pause = std::min<std::chrono::microseconds>(pause * 2, max_barrier_pause);
      }
    } catch (...) {
      // The store is gone or failed: closing without the barrier is all that is left.
    }
  }

  void teardown() noexcept {
    if (worker != nullptr) {
      // Nobody closes an endpoint while a peer may still be sending on it: a barrier first.
      // Every rank arrives, but only a healthy one waits for the others: after an abort, a peer
      // failure or a timed-out wait, or while an exception unwinds, some peer may never arrive
      // (and a failed rank must not wait for peers that may be waiting on it); arriving still
      // lets healthy peers pass at once instead of waiting out the store's timeout. Past the
      // barrier every healthy rank has completed every receive, so no message is in flight, and
      // the endpoints are force-closed: a flushing close needs the peers to progress, and they
      // may be gone.
      const bool healthy =
          !aborted && !timed_out && !any_failed() && std::uncaught_exceptions() == 0;
      if (connected && size > 1) close_barrier(healthy);
      // The rank hosting the store then does not serve a failed job on at exit (a stopped peer
      // would hold it there until the store's linger ends).
      if (!healthy && kv) kv->mark_job_failed();
      cancel_notices();
      drain_unexpected();
      close_endpoints(deadline_after(std::min(timeout, close_limit)));
      ucp_worker_destroy(worker);
      worker = nullptr;
    }
    if (context != nullptr) {
      ucp_cleanup(context);
      context = nullptr;
    }
  }

  void connect() {
    const std::string iface =  // DISTCOMM_IFACE, below
        this->iface.empty() ? distcomm::config::from_env().iface : this->iface;
    ucp_config_t* config = nullptr;
    check("ucp_config_read", ucp_config_read(nullptr, nullptr, &config));
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
      const ucs_status_t ks = ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive_interval);
      if (ks != UCS_OK) {
        ucp_config_release(config);
        throw_status("ucp_config_modify(KEEPALIVE_INTERVAL)", ks);
      }
    }
    if (std::getenv("UCX_RNDV_THRESH") == nullptr && !has_rdma_device()) {
      const ucs_status_t rs = ucp_config_modify(config, "RNDV_THRESH", tcp_rndv_thresh);
      if (rs != UCS_OK) {
        ucp_config_release(config);
        throw_status("ucp_config_modify(RNDV_THRESH)", rs);
      }
    }
    // DISTCOMM_IFACE (a name, address or subnet) becomes UCX's network device, unless
    // UCX_NET_DEVICES names one; one this host does not have is refused before the ranks meet.
    if (!iface.empty() && std::getenv("UCX_NET_DEVICES") == nullptr) {
      std::string device;
      try {
        device = interface_for(iface);
      } catch (...) {
        ucp_config_release(config);
        throw;
      }
      const ucs_status_t ds =
          device.empty() ? UCS_OK : ucp_config_modify(config, "NET_DEVICES", device.c_str());
      if (ds != UCS_OK) {
        ucp_config_release(config);
        throw_status("ucp_config_modify(NET_DEVICES)", ds);
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    // WAKEUP: waits sleep on the worker's event fd instead of spinning (UCP then picks only
    // transports that can signal it; shared memory and TCP can).
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    const ucs_status_t st = ucp_init(&params, config, &context);
    ucp_config_release(config);
    check("ucp_init", st);

    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Serialized, not single: a communicator's collectives run on the caller's thread or on its
    // progress thread (async/progress.hpp), one at a time.
    wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    check("ucp_worker_create", ucp_worker_create(context, &wparams, &worker));
    check("ucp_worker_get_efd", ucp_worker_get_efd(worker, &event_fd));

    peers.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      peers[static_cast<std::size_t>(r)].owner = this;
      peers[static_cast<std::size_t>(r)].rank = r;
    }
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

    // The store waits below do not progress the worker, and need not: creating an endpoint from
    // a worker address is local, and the wireup messages it sends are answered once the peer
    // first progresses (at the latest in its first wait).
    std::vector<std::string> addresses;
    for (int r = 0; r < size; ++r) {
      if (r != rank) addresses.push_back(prefix + "addr/" + std::to_string(r));
    }
    try {
      store_wait(*kv, addresses, timeout);
    } catch (const timeout_error& e) {
      throw timeout_error("ucx: rank " + std::to_string(rank) +
                          " waiting for the peers' worker addresses: " + e.what() +
                          "; is every rank running?");
    }
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
        throw backend_error(ucx_backend::name, "ucp_ep_create", static_cast<long>(es),
                            "connecting to rank " + std::to_string(r) + ": " + status_text(es) +
                                (es == UCS_ERR_UNREACHABLE
                                     ? " (set DISTCOMM_IFACE, or UCX_NET_DEVICES, to an interface "
                                       "or subnet the peers can reach)"
                                     : ""));
      }
    }
    handshake();
    post_notices();
    connected = true;
  }

  // One zero-byte message each way with every peer, while every rank progresses here: UCP's
  // wireup (TCP connections and their wireup messages) completes now, so a rank never starts
  // its first collective, or exits, with a connection still half open, and a peer that cannot
  // be reached fails the constructor instead of the first collective. Bounded by the backend's
  // timeout (and the store's, when shorter), like the address exchange.
  void handshake() {
    static unsigned char sink = 0;  // zero bytes move; UCX only needs a valid address
    struct pending {
      int peer;
      ucs_status_ptr_t req;
    };
    std::vector<pending> reqs;
    const auto release_all = [&] {
      for (pending& q : reqs) {
        if (q.req == nullptr || UCS_PTR_IS_ERR(q.req)) continue;
        ucp_request_cancel(worker, q.req);
        ucp_request_free(q.req);  // UCX releases it once cancelled or complete
        q.req = nullptr;
      }
    };
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      ucp_request_param_t param{};
      reqs.push_back({r, ucp_tag_recv_nbx(worker, &sink, 0, handshake_tag(r), full_mask, &param)});
      reqs.push_back({r, ucp_tag_send_nbx(peers[static_cast<std::size_t>(r)].ep, &sink, 0,
                                          handshake_tag(rank), &param)});
    }
    const auto status_of = [](ucs_status_ptr_t req) {
      if (req == nullptr) return UCS_OK;
      if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
      return ucp_request_check_status(req);
    };
    const auto settled = [&] {
      if (any_failed()) return true;
      for (const pending& q : reqs) {
        if (status_of(q.req) == UCS_INPROGRESS) return false;
      }
      return true;
    };
    const std::chrono::duration<double> limit = std::min(kv->timeout(), timeout);
    progress_until(settled, deadline_after(limit));
    const auto who = [](int r) { return "ucx: connecting to rank " + std::to_string(r); };
    for (const ucx_peer& p : peers) {
      if (!p.failed) continue;
      release_all();
      throw peer_lost_error(who(p.rank) + " failed: " + p.failure);
    }
    for (const pending& q : reqs) {
      const ucs_status_t st = status_of(q.req);
      if (st == UCS_OK) continue;
      release_all();
      if (st == UCS_INPROGRESS) {
        char waited[32];
        std::snprintf(waited, sizeof waited, "%g", limit.count());
        throw timeout_error(who(q.peer) + ": no answer within " + waited +
                            " s (DISTCOMM_TIMEOUT); is that rank running?");
      }
      if (is_peer_failure(st)) throw peer_lost_error(who(q.peer) + " failed: " + status_text(st));
      throw backend_error(ucx_backend::name, "handshake", static_cast<long>(st),
                          who(q.peer) + ": " + status_text(st));
    }
    for (pending& q : reqs) {
      if (q.req != nullptr && !UCS_PTR_IS_ERR(q.req)) ucp_request_free(q.req);
    }
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
      bytes_(other.bytes_),
      got_(other.got_),
      source_(other.source_) {}

ucx_request& ucx_request::operator=(ucx_request&& other) noexcept {
  if (this != &other) {
    cancel();
    state_ = std::move(other.state_);
    handle_ = std::exchange(other.handle_, nullptr);
    kind_ = other.kind_;
    peer_ = other.peer_;
    tag_ = other.tag_;
    bytes_ = other.bytes_;
    got_ = other.got_;
    source_ = other.source_;
  }
  return *this;
}

ucx_request::~ucx_request() { cancel(); }

std::string ucx_request::transfer() const {
  return std::string(kind_ == kind::send ? "send of " : "receive of ") + std::to_string(bytes_) +
         " bytes " + (kind_ == kind::send ? "to" : "from") +
         (peer_ < 0 ? std::string(" any rank") : " rank " + std::to_string(peer_)) + " (tag " +
         std::to_string(tag_) + ")";
}

std::string ucx_request::describe() const { return "ucx: " + transfer(); }

void ucx_request::cancel() noexcept {
  if (handle_ == nullptr) return;
  detail::ucx_state& s = *state_;
  if (s.worker == nullptr) {  // retired: the request went with it
    handle_ = nullptr;
    return;
  }
  const auto released = [this] { return ucp_request_check_status(handle_) != UCS_INPROGRESS; };
  ucp_request_cancel(s.worker, handle_);
  if (!s.progress_until(released, clock::now() + detail::cancel_grace)) {
    // A transfer UCP could not cancel (a rendezvous in flight): force-closing the endpoint
    // completes the requests on it. The peer is then unusable, and says why. A receive from any
    // rank names no endpoint, and its sender may be any peer: every endpoint is closed.
    const auto close = [&s](detail::ucx_peer& p) noexcept {
      p.fail("its endpoint was closed to cancel a pending transfer");
      s.close_endpoint(p, deadline_after(detail::cancel_grace));
    };
    if (peer_ >= 0) {
      close(s.peers[static_cast<std::size_t>(peer_)]);
    } else {
      for (detail::ucx_peer& p : s.peers) close(p);
    }
    if (!s.progress_until(released, clock::now() + detail::cancel_grace)) {
      std::string why;
      try {
        why = describe() + " could not be cancelled (its sender stopped mid-transfer?); this "
              "rank's UCX worker was closed to release the buffer";
      } catch (...) {
      }
      s.retire_worker(why);
      handle_ = nullptr;
      return;
    }
  }
  ucp_request_free(handle_);
  handle_ = nullptr;
}

bool ucx_request::poll() {
  detail::ucx_state& s = *state_;
  if (s.worker == nullptr) {  // retired (cancel()): the request went with it
    handle_ = nullptr;
    throw peer_lost_error(describe() + " failed: " + s.abort_reason);
  }
  ucs_status_t st;
  std::size_t received = bytes_;
  if (kind_ == kind::recv) {
    ucp_tag_recv_info_t info{};
    st = ucp_tag_recv_request_test(handle_, &info);
    if (st == UCS_INPROGRESS) return false;
    received = info.length;
    if (source_ && st == UCS_OK) {
      peer_ = detail::source_of(info.sender_tag);
      *source_ = peer_;
    }
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
    // (A receive from any rank that failed before a message matched names no peer.)
    const detail::ucx_peer* p = peer_ < 0 ? nullptr : &s.peers[static_cast<std::size_t>(peer_)];
    const bool peer_failed = p != nullptr && p->failed;
    if (peer_failed || detail::is_peer_failure(st)) {
      throw peer_lost_error(describe() + " failed: peer rank " + std::to_string(peer_) + " lost (" +
                            (peer_failed ? p->failure : detail::status_text(st)) + ")");
    }
    throw backend_error(ucx_backend::name,
                        kind_ == kind::send ? "ucp_tag_send_nbx" : "ucp_tag_recv_nbx",
                        static_cast<long>(st), describe() + ": " + detail::status_text(st));
  }
  if (got_ && received <= bytes_) {
    *got_ = received;
  } else if (received != bytes_) {
    throw mismatch_error(describe() + ": the matching send has " + std::to_string(received) +
                         " bytes (sizes differ across ranks)");
  }
  return true;
}

bool ucx_request::settled() {
  if (poll()) return true;
  const detail::ucx_state& s = *state_;
  if (s.aborted) {
    cancel();
    throw peer_lost_error(s.abort_reason);
  }
  if (s.noticed >= 0) {
    // A peer that gave up first explains why this transfer cannot complete: its reason names
    // the rank it was waiting for. When that peer is not this request's, say what we waited on.
    std::string msg = "ucx: rank " + std::to_string(s.rank) + ": " + s.notice_text();
    if (s.noticed != peer_) {
      msg += " (rank " + std::to_string(s.rank) + " itself was waiting on a " + transfer() + ")";
    }
    cancel();
    throw peer_lost_error(msg);
  }
  if (peer_ < 0) return false;  // from any rank: one peer lost does not fail it
  const detail::ucx_peer& p = s.peers[static_cast<std::size_t>(peer_)];
  if (p.failed) {
    const std::string why = p.failure;
    cancel();
    throw peer_lost_error(describe() + " failed: peer rank " + std::to_string(peer_) + " lost (" +
                          why + ")");
  }
  return false;
}

bool ucx_request::test() {
  if (handle_ == nullptr) return true;
  state_->progress_once();
  return settled();
}

void ucx_request::wait(deadline until) {
  if (handle_ == nullptr) return;
  if (!state_->progress_until([this] { return settled(); }, until)) {
    state_->timed_out = true;
    const std::string what = describe();
    cancel();
    // A receive from any rank knows its sender only once complete: in a world of two, the other.
    std::string who = "no rank sent it";
    if (peer_ >= 0) {
      who = "rank " + std::to_string(peer_) + " did not complete it";
    } else if (state_->size == 2) {
      who = "rank " + std::to_string(1 - state_->rank) + ", the only other, did not send it";
    }
    throw timeout_error(what + " timed out: " + who + " before the deadline (DISTCOMM_TIMEOUT)");
  }
}

// ---- ucx_backend ------------------------------------------------------------------------------

ucx_backend::ucx_backend(store& kv, int rank, int size,
                         std::optional<std::chrono::duration<double>> timeout)
    : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw invalid_argument_error("ucx_backend: rank " + std::to_string(rank) +
                                 " is not below world size " + std::to_string(size));
  }
  state_ = std::make_shared<detail::ucx_state>();
  state_->kv = std::shared_ptr<store>(&kv, [](store*) {});  // the caller keeps it alive
  state_->rank = rank;
  state_->size = size;
  state_->timeout = timeout ? *timeout : config::from_env().timeout;
  state_->connect();
}

std::optional<ucx_backend> ucx_backend::split(const std::vector<int>& members,
                                              const std::string& name) {
  if (members.empty()) return std::nullopt;
  job j;
  j.world.rank = detail::position_in(members, rank_, ucx_backend::name);
  j.world.size = static_cast<int>(members.size());
  j.kv = std::make_shared<prefix_store>(state_->prefix + "split/" + name, state_->kv);
  return ucx_backend(j, state_->timeout, state_->iface);
}

std::shared_ptr<store> ucx_backend::group_store() const {
  if (!state_->kv) throw invalid_argument_error("ucx: this backend has no store (a world of 1)");
  return std::make_shared<prefix_store>(state_->prefix + "group/", state_->kv);
}

ucx_backend::ucx_backend(const job& j, std::optional<std::chrono::duration<double>> timeout,
                         std::string iface)
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
  state_->timeout = timeout ? *timeout : config::from_env().timeout;
  state_->iface = std::move(iface);
  state_->connect();
}

void ucx_backend::check_peer(const char* what, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error(std::string("ucx: ") + what + ": peer " + std::to_string(peer) +
                                 " is not another rank of this world (rank " +
                                 std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  }
  if (state_->aborted) throw peer_lost_error(state_->abort_reason);
  if (state_->noticed >= 0) {
    throw peer_lost_error("ucx: rank " + std::to_string(rank_) + ": " + what + " to/from rank " +
                          std::to_string(peer) + ": " + state_->notice_text());
  }
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
    throw backend_error(ucx_backend::name, "ucp_tag_send_nbx", static_cast<long>(st),
                        req.describe() + ": " + detail::status_text(st));
  }
  req.handle_ = r;
  return req;
}

ucx_request ucx_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  return irecv_up_to(data, bytes, nullptr, peer, tag);
}

ucx_request ucx_backend::irecv_up_to(void* data, std::size_t bytes, std::size_t* got, int peer,
                                     tag_t tag) {
  check_peer("irecv", peer);
  return post_recv(data, bytes, got, nullptr, peer, tag);
}

ucx_request ucx_backend::irecv_any(void* data, std::size_t bytes, int* source, tag_t tag) {
  return post_recv(data, bytes, nullptr, source, -1, tag);
}

ucx_request ucx_backend::post_recv(void* data, std::size_t bytes, std::size_t* got, int* source,
                                   int peer, tag_t tag) {
  if (state_->aborted) throw peer_lost_error(state_->abort_reason);
  static unsigned char empty = 0;
  // Always a request (no in-place completion): its length is then read back reliably through
  // ucp_tag_recv_request_test, the one place every size check happens.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  const ucs_status_ptr_t r = ucp_tag_recv_nbx(
      state_->worker, bytes == 0 ? &empty : data, bytes, detail::make_tag(peer < 0 ? 0 : peer, tag),
      peer < 0 ? detail::any_source_mask : detail::full_mask, &param);
  ucx_request req(state_, nullptr, ucx_request::kind::recv, peer, tag, bytes);
  req.got_ = got;
  req.source_ = source;
  if (UCS_PTR_IS_ERR(r)) {
    const ucs_status_t st = UCS_PTR_STATUS(r);
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
      throw mismatch_error(req.describe() +
                           ": the matching send is larger (sizes differ across ranks)");
    }
    throw backend_error(ucx_backend::name, "ucp_tag_recv_nbx", static_cast<long>(st),
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
  if (state_->kv) state_->kv->mark_job_failed();
  // The notice tells every peer why (UCX carries no reason, and a force-closed endpoint leaves
  // the connection to the peer open until this worker goes); then force-close (no flush,
  // bounded), so nothing of ours stays in flight.
  if (state_->connected && size_ > 1) {
    try {
      state_->notice_out = reason;
      if (state_->notice_out.size() >= detail::notice_bytes) {
        state_->notice_out.resize(detail::notice_bytes - 1);
      }
      state_->send_notices();
    } catch (...) {
    }
  }
  state_->close_endpoints(deadline_after(std::chrono::seconds(5)));
}

ucx_backend ucx_backend::connect(const config& cfg, const job* given) {
  // A DISTCOMM_IFACE this host does not have: refused on every rank before they meet.
  if (!cfg.iface.empty()) (void)interface_for(cfg.iface);
  return ucx_backend(given ? *given : shared_bootstrap(cfg), cfg.timeout, cfg.iface);
}

}  // namespace distcomm
