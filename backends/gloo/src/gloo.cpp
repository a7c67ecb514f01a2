// The gloo backend. Every message is two gloo unbound-buffer transfers on slots derived from the
// tag: an 8-byte size word, then the payload. The receiver posts the payload receive only after
// the size word matched its own, because gloo itself cannot report a size mismatch (a larger send
// fails an assertion on gloo's event-loop thread; a smaller one completes silently). Payloads go
// through memory the backend owns, since gloo cannot cancel a posted transfer: a destroyed
// request leaves its transfer running into that memory, kept in `orphans` until it ends.
// Waits use our own deadline on the buffer's condition variable: gloo's timed wait closes every
// pair of the context when it times out, which would turn one slow peer into a dead job.
// Failures: abort(reason) sends the reason to every peer (one receive per peer stays posted on a
// slot of its own) before closing the connections, so a peer can say which rank gave up and why
// (e.g. the rank that rank waited for) instead of only "connection closed"; a peer that closes
// without one exited, died or lost its network. gloo writes with writev(2), which raises SIGPIPE
// once a peer is gone: SIGPIPE is blocked in gloo's event-loop thread and around our calls into
// gloo, so that a lost peer is an error, not the end of this process.
#include "distcomm/backends/gloo.hpp"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/unbound_buffer.h>
#include <net/if.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "gloo_store.hpp"

namespace distcomm {
namespace detail {
namespace {

namespace tcp = gloo::transport::tcp;

// gloo keeps the transport context protected; our buffers need it to be constructed directly.
class exposed_context : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  std::shared_ptr<tcp::Context> transport() const {
    return std::dynamic_pointer_cast<tcp::Context>(transportContext_);
  }
};

// A tcp unbound buffer whose completion can be polled and waited with our own deadline (gloo
// offers neither without side effects, see the top of this file).
class tracked_buffer : public tcp::UnboundBuffer {
 public:
  using tcp::UnboundBuffer::UnboundBuffer;
  ~tracked_buffer() override = default;
  bool done(bool send) {
    std::lock_guard<std::mutex> lock(m_);
    if (ex_) std::rethrow_exception(ex_);
    return (send ? sendCompletions_ : recvCompletions_) > 0;
  }
  // Completed, whatever happened to the connection since (an abort notice is read before the
  // connection's end is).
  bool arrived(bool send) {
    std::lock_guard<std::mutex> lock(m_);
    return (send ? sendCompletions_ : recvCompletions_) > 0;
  }
  bool wait_until(bool send, clock::time_point until) {
    std::unique_lock<std::mutex> lock(m_);
    auto& cv = send ? sendCv_ : recvCv_;
    cv.wait_until(lock, until, [&] {
      return ex_ != nullptr || (send ? sendCompletions_ : recvCompletions_) > 0;
    });
    if (ex_) std::rethrow_exception(ex_);
    return (send ? sendCompletions_ : recvCompletions_) > 0;
  }
};

constexpr std::uint64_t slot_prefix = std::uint64_t{0xD1} << 56;
std::uint64_t slot_of(tag_t tag, bool payload) {
  return slot_prefix | (std::uint64_t{tag} << 1) | (payload ? 1u : 0u);
}

// Abort notices: one slot, and at most this many bytes of the reason (NUL-terminated).
constexpr std::uint64_t notice_slot = std::uint64_t{0xD2} << 56;
constexpr std::size_t notice_bytes = 512;
// How long abort() lets its notices leave before closing the connections: a healthy peer takes
// one at once; a stopped one never does, and must not hold up the abort.
constexpr auto notice_send_limit = std::chrono::milliseconds(100);

// How long a wait sleeps before looking at the abort flag and the notices again.
constexpr auto abort_poll = std::chrono::milliseconds(50);

// Blocks SIGPIPE in this thread for its lifetime; one that a write to a lost peer raised meanwhile
// is discarded (unless one was pending already), so the write fails with EPIPE instead of killing
// the process. The process's own SIGPIPE disposition is left alone.
class sigpipe_guard {
 public:
  sigpipe_guard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~sigpipe_guard() {
    sigset_t pending;
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
};

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

std::string one_decimal(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", seconds);
  return buf;
}

std::string describe(bool send, int peer, tag_t tag, std::size_t bytes) {
  return std::string(send ? "send to" : "receive from") + " rank " + std::to_string(peer) +
         " (tag " + std::to_string(tag) + ", " + std::to_string(bytes) + " bytes)";
}

}  // namespace

struct gloo_op {
  bool send = false;
  int peer = 0;
  tag_t tag = 0;
  std::size_t bytes = 0;
  void* user = nullptr;             // receive destination; null once the request is gone
  std::uint64_t size_word = 0;      // the sender's byte count
  std::vector<unsigned char> data;  // payload the backend owns
  std::unique_ptr<tracked_buffer> header;
  std::unique_ptr<tracked_buffer> payload;
  bool header_checked = false;  // receive: size word arrived and the payload receive was posted
  bool delivered = false;       // receive: payload copied to `user`
  bool mismatch = false;
  clock::time_point posted = clock::now();

  // True when gloo no longer touches this op's memory.
  bool finished() {
    if (send) return header->done(true) && (!payload || payload->done(true));
    return header_checked && (!payload || payload->done(false));
  }
};

// One abort notice, received from a peer or sent to one.
struct gloo_notice {
  std::array<char, notice_bytes> text{};
  std::unique_ptr<tracked_buffer> buffer;
};

struct gloo_state {
  std::shared_ptr<exposed_context> context;
  std::shared_ptr<tcp::Context> transport;
  int rank = 0;
  int size = 1;
  std::chrono::duration<double> timeout{300.0};
  std::mutex mutex;
  std::map<std::pair<int, tag_t>, std::deque<std::shared_ptr<gloo_op>>> unmatched;
  std::vector<std::shared_ptr<gloo_op>> orphans;
  std::atomic<bool> aborted{false};
  std::string abort_reason;
  std::uint32_t native_tag = 0;
  std::vector<gloo_notice> notices_in;   // by peer; posted receives (this rank's entry unused)
  std::vector<gloo_notice> notices_out;  // sent by abort(); gloo may still be writing them

  void throw_if_aborted() {
    if (aborted.load()) {
      std::lock_guard<std::mutex> lock(mutex);
      throw peer_lost_error("gloo: rank " + std::to_string(rank) + " aborted: " + abort_reason);
    }
  }

  void post_notices() {
    notices_in.resize(static_cast<std::size_t>(size));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
      try {
        n.buffer = std::make_unique<tracked_buffer>(transport, n.text.data(), n.text.size());
        n.buffer->recv(p, notice_slot, 0, n.text.size());
      } catch (const gloo::IoException&) {
        // The peer has closed its side already (a backend built and dropped unused): no notice
        // can come from it, and any operation with it fails on its own.
        n.buffer.reset();
      }
    }
  }

  // The first peer (only `peer` unless -1) whose abort notice arrived, or -1.
  int aborted_peer(int peer = -1) {
    for (int p = 0; p < static_cast<int>(notices_in.size()); ++p) {
      if (peer >= 0 && p != peer) continue;
      const gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
      if (n.buffer && n.buffer->arrived(false)) return p;
    }
    return -1;
  }

  std::string notice_of(int p) const {
    return "rank " + std::to_string(p) +
           " aborted: " + std::string(notices_in[static_cast<std::size_t>(p)].text.data());
  }

  // A peer that gave up first explains why `op` cannot complete: its reason names the rank it
  // was waiting for. When that peer is not op's, say what this rank was waiting for too.
  void throw_if_peer_aborted(const gloo_op& op, int peer = -1) {
    const int p = aborted_peer(peer);
    if (p < 0) return;
    std::string msg = "gloo: rank " + std::to_string(rank) + ": " + notice_of(p);
    if (p != op.peer) {
      msg += " (rank " + std::to_string(rank) + " itself was waiting " +
             one_decimal(seconds_since(op.posted)) + " s for a " +
             describe(op.send, op.peer, op.tag, op.bytes) + ")";
    }
    throw peer_lost_error(msg);
  }

  // Sends `reason` to every peer, for at most notice_send_limit. Caller holds no lock.
  void send_notices(const std::string& reason) {
    notices_out.resize(static_cast<std::size_t>(size));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      gloo_notice& n = notices_out[static_cast<std::size_t>(p)];
      const std::size_t len = std::min(reason.size(), n.text.size() - 1);
      std::memcpy(n.text.data(), reason.data(), len);
      try {
        n.buffer = std::make_unique<tracked_buffer>(transport, n.text.data(), len);
        n.buffer->send(p, notice_slot, 0, len);
      } catch (...) {
        n.buffer.reset();  // that connection is gone already
      }
    }
    const auto until = clock::now() + notice_send_limit;
    for (gloo_notice& n : notices_out) {
      try {
        if (n.buffer) n.buffer->wait_until(true, until);
      } catch (...) {
      }
    }
  }

  // Size words arrive in posting order per (peer, tag); match them to receives in that order.
  // Caller holds `mutex`.
  void progress(int peer, tag_t tag) {
    auto it = unmatched.find({peer, tag});
    if (it == unmatched.end()) return;
    auto& queue = it->second;
    while (!queue.empty() && queue.front()->header->done(false)) {
      std::shared_ptr<gloo_op> op = std::move(queue.front());
      queue.pop_front();
      op->header_checked = true;
      const std::size_t remote = static_cast<std::size_t>(op->size_word);
      op->mismatch = remote != op->bytes;
      // On a mismatch the payload is still drained (into our memory), so the next message of
      // this (peer, tag) finds the stream where it expects it.
      if (remote > 0) {
        op->data.resize(remote);
        op->payload = std::make_unique<tracked_buffer>(transport, op->data.data(), remote);
        const sigpipe_guard no_sigpipe;  // posting a receive writes a notification
        op->payload->recv(peer, slot_of(tag, true), 0, remote);
      }
    }
    if (queue.empty()) unmatched.erase(it);
  }

  void reap_orphans() {
    orphans.erase(std::remove_if(orphans.begin(), orphans.end(),
                                 [](const std::shared_ptr<gloo_op>& op) {
                                   try {
                                     return op->finished();
                                   } catch (...) {
                                     return true;  // the pair failed: gloo is done with it
                                   }
                                 }),
                  orphans.end());
  }

  [[noreturn]] void rethrow_transport(const gloo_op& op) {
    const std::string what = describe(op.send, op.peer, op.tag, op.bytes);
    try {
      throw;
    } catch (const error&) {
      throw;
    } catch (const gloo::IoException& e) {
      // A peer that aborted sent its reason before closing; gloo reads it before the close.
      throw_if_peer_aborted(op, op.peer);
      throw peer_lost_error("gloo: " + what + " failed on rank " + std::to_string(rank) +
                            ": rank " + std::to_string(op.peer) +
                            " closed the connection without an abort notice: it exited, was "
                            "killed or crashed, or the network failed (" +
                            e.what() + ")");
    } catch (const std::exception& e) {
      throw backend_error("gloo", op.send ? "send" : "recv", 0, what + ": " + e.what());
    }
  }

  // Completes op if it can without waiting; true when it is complete.
  bool poll(gloo_op& op) {
    throw_if_aborted();
    try {
      if (op.send) return op.finished();
      std::lock_guard<std::mutex> lock(mutex);
      if (!op.header_checked) progress(op.peer, op.tag);
      if (!op.header_checked) return false;
      if (op.mismatch) {
        throw mismatch_error("gloo: rank " + std::to_string(rank) + " posted a " +
                             describe(false, op.peer, op.tag, op.bytes) + " but rank " +
                             std::to_string(op.peer) + " sent " + std::to_string(op.size_word) +
                             " bytes; every rank must pass the same sizes");
      }
      if (op.payload && !op.payload->done(false)) return false;
      if (!op.delivered) {
        if (op.bytes > 0 && op.user != nullptr) std::memcpy(op.user, op.data.data(), op.bytes);
        op.delivered = true;
      }
      return true;
    } catch (...) {
      rethrow_transport(op);
    }
  }

  void wait(gloo_op& op, deadline until) {
    for (bool waited = false;; waited = true) {
      if (poll(op)) return;
      // Only once this wait has slept: the notices are one lock per peer.
      if (waited) throw_if_peer_aborted(op);
      const auto now = clock::now();
      if (now >= until) {
        throw_if_peer_aborted(op);
        throw timeout_error("gloo: " + describe(op.send, op.peer, op.tag, op.bytes) + " on rank " +
                            std::to_string(rank) + " did not complete before its deadline; rank " +
                            std::to_string(op.peer) +
                            " may be stopped, slow or dead (raise DISTCOMM_TIMEOUT if slow)");
      }
      const auto slice = std::min<clock::time_point>(until, now + abort_poll);
      try {
        if (op.send) {
          if (!op.header->wait_until(true, slice)) continue;
          if (op.payload) op.payload->wait_until(true, slice);
        } else if (!op.header_checked) {
          op.header->wait_until(false, slice);
        } else if (op.payload) {
          op.payload->wait_until(false, slice);
        }
      } catch (...) {
        rethrow_transport(op);
      }
    }
  }
};

}  // namespace detail

// ---- request ----------------------------------------------------------------------------------

gloo_request& gloo_request::operator=(gloo_request&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    op_ = std::move(other.op_);
  }
  return *this;
}

gloo_request::~gloo_request() { release(); }

void gloo_request::release() noexcept {
  if (!op_) return;
  try {
    std::lock_guard<std::mutex> lock(state_->mutex);
    op_->user = nullptr;  // the caller's buffer is never written after this
    bool done = false;
    try {
      done = op_->finished();
    } catch (...) {
      done = true;
    }
    if (!done) state_->orphans.push_back(op_);
  } catch (...) {
  }
  op_.reset();
  state_.reset();
}

bool gloo_request::test() {
  if (!op_) return true;
  return state_->poll(*op_);
}

void gloo_request::wait(deadline until) {
  if (!op_) return;
  state_->wait(*op_, until);
}

// ---- backend ----------------------------------------------------------------------------------

namespace {

std::string default_hostname(const gloo_options& opts) {
  if (!opts.hostname.empty()) return opts.hostname;
  if (const char* iface = std::getenv("DISTCOMM_IFACE"); iface != nullptr && *iface != '\0') {
    return iface;
  }
  if (opts.single_node) return "127.0.0.1";
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

}  // namespace

gloo_backend::gloo_backend(const job& j, gloo_options opts)
    : gloo_backend(j.kv, j.world.rank, j.world.size, [&] {
        opts.single_node = j.world.single_node();
        return opts;
      }()) {}

gloo_backend::gloo_backend(std::shared_ptr<store> kv, int rank, int size, gloo_options opts)
    : state_(std::make_shared<detail::gloo_state>()), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw invalid_argument_error("gloo: rank " + std::to_string(rank) +
                                 " is not within a world of size " + std::to_string(size));
  }
  if (!kv) {
    if (size != 1) {
      throw invalid_argument_error("gloo: a world of " + std::to_string(size) +
                                   " ranks needs a store (bootstrap() gives one)");
    }
    kv = std::make_shared<hash_store>(opts.timeout);
  }
  std::string prefix = opts.prefix;
  if (prefix.empty()) {
    // Every rank creates its communicators in the same order, so the n-th one of each rank
    // gets the same prefix.
    const auto n = kv->add("distcomm/gloo/count/" + std::to_string(rank), 1);
    prefix = "distcomm/gloo/" + std::to_string(n);
  }

  gloo::transport::tcp::attr attr;
  const std::string host = default_hostname(opts);
  if (::if_nametoindex(host.c_str()) != 0) {
    attr.iface = host;
  } else {
    attr.hostname = host;
  }
  const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout);
  state_->rank = rank;
  state_->size = size;
  state_->timeout = opts.timeout;
  try {
    // The device starts gloo's event-loop thread, which inherits this thread's signal mask: it
    // runs with SIGPIPE blocked for good.
    const detail::sigpipe_guard no_sigpipe;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<detail::exposed_context>(rank, size);
    context->setTimeout(timeout_ms);
    detail::gloo_store_adapter adapter(kv, prefix);
    context->connectFullMesh(adapter, device);
    state_->transport = context->transport();
    state_->context = std::move(context);
    if (state_->transport) state_->post_notices();
  } catch (const error&) {
    throw;
  } catch (const gloo::IoException& e) {
    throw peer_lost_error(std::string("gloo: connecting rank ") + std::to_string(rank) +
                          " to its peers on " + host + " failed: " + e.what() +
                          " (set DISTCOMM_IFACE to an interface or address the peers can reach)");
  } catch (const std::exception& e) {
    throw backend_error("gloo", "connectFullMesh", 0, e.what());
  }
  if (!state_->transport) {
    throw backend_error("gloo", "connectFullMesh", 0, "the context does not use the tcp transport");
  }
  // A rank whose connections are all up may return, use the backend and drop it before a slower
  // peer got its own connect call in; that peer would then find the connection closed and fail
  // to construct. Nobody leaves before every rank is connected.
  if (size > 1) store_barrier(*kv, prefix + "/connected", rank, size);
}

gloo_request gloo_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  state_->throw_if_aborted();
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error("gloo: isend to rank " + std::to_string(peer) + " from rank " +
                                 std::to_string(rank_) + " in a world of " + std::to_string(size_));
  }
  auto op = std::make_shared<detail::gloo_op>();
  op->send = true;
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->size_word = bytes;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->reap_orphans();
  const detail::sigpipe_guard no_sigpipe;
  try {
    op->header = std::make_unique<detail::tracked_buffer>(state_->transport, &op->size_word,
                                                          sizeof(op->size_word));
    op->header->send(peer, detail::slot_of(tag, false), 0, sizeof(op->size_word));
    if (bytes > 0) {
      const auto* p = static_cast<const unsigned char*>(data);
      op->data.assign(p, p + bytes);
      op->payload =
          std::make_unique<detail::tracked_buffer>(state_->transport, op->data.data(), bytes);
      op->payload->send(peer, detail::slot_of(tag, true), 0, bytes);
    }
  } catch (...) {
    state_->rethrow_transport(*op);
  }
  return gloo_request(state_, std::move(op));
}

gloo_request gloo_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  state_->throw_if_aborted();
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error("gloo: irecv from rank " + std::to_string(peer) + " on rank " +
                                 std::to_string(rank_) + " in a world of " + std::to_string(size_));
  }
  auto op = std::make_shared<detail::gloo_op>();
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->user = data;
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->reap_orphans();
  const detail::sigpipe_guard no_sigpipe;  // posting a receive writes a notification
  try {
    op->header = std::make_unique<detail::tracked_buffer>(state_->transport, &op->size_word,
                                                          sizeof(op->size_word));
    op->header->recv(peer, detail::slot_of(tag, false), 0, sizeof(op->size_word));
    state_->unmatched[{peer, tag}].push_back(op);
  } catch (...) {
    state_->rethrow_transport(*op);
  }
  return gloo_request(state_, std::move(op));
}

void gloo_backend::abort(const std::string& reason) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->aborted.load()) return;
      state_->abort_reason = reason;
      state_->aborted = true;
    }
    const detail::sigpipe_guard no_sigpipe;
    if (state_->transport) state_->send_notices(reason);
    // Closing the connections makes the peers' pending transfers fail at once, also inside
    // gloo's own collectives, which never look at the notices.
    if (state_->context) state_->context->closeConnections();
  } catch (...) {
  }
}

// ---- native collectives -----------------------------------------------------------------------

namespace {

using reduce_fn = std::function<void(void*, const void*, const void*, size_t)>;

template <class T>
reduce_fn gloo_reduce(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>);
    case reduce_op::prod:
      return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::product<T>);
    case reduce_op::min:
      return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<T>);
    case reduce_op::max:
      return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>);
  }
  return {};
}

std::chrono::milliseconds left_until(deadline until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

template <class F>
void run_native(detail::gloo_state& s, const char* what, deadline until, F&& body) {
  s.throw_if_aborted();
  const detail::sigpipe_guard no_sigpipe;
  try {
    body();
  } catch (const error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const std::string msg = std::string("gloo: native ") + what + " on rank " +
                            std::to_string(s.rank) + " failed: " + e.what();
    // gloo's collectives do not say which peer failed; a notice says who gave up and why.
    if (const int p = s.aborted_peer(); p >= 0) throw peer_lost_error(msg + "; " + s.notice_of(p));
    if (clock::now() >= until) throw timeout_error(msg + " (deadline passed; DISTCOMM_TIMEOUT)");
    throw peer_lost_error(msg);
  } catch (const std::exception& e) {
    throw backend_error("gloo", what, 0, e.what());
  }
}

template <class T>
void set_allreduce(gloo::AllreduceOptions& o, const void* in, void* out, std::size_t count,
                   reduce_fn fn) {
  if (in != out) o.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
  o.setOutput(static_cast<T*>(out), count);
  o.setReduceFunction(std::move(fn));
}

}  // namespace

void gloo_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                    reduce_op op, deadline until) {
  if (count == 0) return;
  run_native(*state_, "allreduce", until, [&] {
    gloo::AllreduceOptions o(state_->context);
    const reduce_op base = op == reduce_op::avg ? reduce_op::sum : op;
    switch (t) {
      case dtype::f32:
        set_allreduce<float>(o, in, out, count, gloo_reduce<float>(op));
        break;
      case dtype::f64:
        set_allreduce<double>(o, in, out, count, gloo_reduce<double>(op));
        break;
      case dtype::i8:
        set_allreduce<std::int8_t>(o, in, out, count, gloo_reduce<std::int8_t>(op));
        break;
      case dtype::u8:
        set_allreduce<std::uint8_t>(o, in, out, count, gloo_reduce<std::uint8_t>(op));
        break;
      case dtype::i32:
        set_allreduce<std::int32_t>(o, in, out, count, gloo_reduce<std::int32_t>(op));
        break;
      case dtype::i64:
        set_allreduce<std::int64_t>(o, in, out, count, gloo_reduce<std::int64_t>(op));
        break;
      case dtype::f16:
      case dtype::bf16:
        // gloo's half type is not DistComm's; DistComm's kernels do the arithmetic.
        set_allreduce<std::uint16_t>(o, in, out, count,
                                     [t, base](void* c, const void* a, const void* b, size_t n) {
                                       combine(c, a, b, n, t, base);
                                     });
        break;
    }
    o.setTag(state_->native_tag++);
    o.setTimeout(left_until(until));
    gloo::allreduce(o);
    if (op == reduce_op::avg) divide(out, out, count, t, static_cast<std::size_t>(size_));
  });
}

void gloo_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                    deadline until) {
  if (count == 0) return;
  run_native(*state_, "broadcast", until, [&] {
    gloo::BroadcastOptions o(state_->context);
    o.setOutput(static_cast<std::uint8_t*>(data), count * dtype_size(t));
    o.setRoot(root);
    o.setTag(state_->native_tag++);
    o.setTimeout(left_until(until));
    gloo::broadcast(o);
  });
}

void gloo_backend::native_barrier(deadline until) {
  run_native(*state_, "barrier", until, [&] {
    gloo::BarrierOptions o(state_->context);
    o.setTag(state_->native_tag++);
    o.setTimeout(left_until(until));
    gloo::barrier(o);
  });
}

}  // namespace distcomm
