// The gloo backend: construction over the store, the request handle, abort, and gloo's own
// collectives. Point-to-point messages, their matching and the abort notices are gloo_p2p.cpp's.
#include "distcomm/backends/gloo.hpp"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/transport/tcp/device.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <utility>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/rendezvous/interface.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"
#include "gloo_p2p.hpp"
#include "gloo_store.hpp"

namespace distcomm {

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
  state_->cancel(op_);
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

// gloo takes an interface name or a host name to bind; one that is neither makes it fail without
// saying why (it crashed), so it is checked first.
void check_bindable(const std::string& host, const gloo_options& opts) {
  if (::if_nametoindex(host.c_str()) != 0) return;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return;
  const bool from_env = opts.hostname.empty() && !config::from_env().iface.empty();
  throw invalid_argument_error(
      "gloo: " + std::string(from_env ? "DISTCOMM_IFACE=" : "the address to bind, ") + host +
      ", is neither a network interface of this host (" + describe_local_addresses() +
      ") nor a name or address it resolves (" + ::gai_strerror(rc) + ")" +
      (from_env ? "; set DISTCOMM_IFACE to one of the interfaces the peers can reach"
                : "; set DISTCOMM_IFACE to an interface the peers can reach"));
}

}  // namespace

void check_interface(const gloo_options& opts) {
  if (opts.hostname.empty() && config::from_env().iface.empty()) return;
  check_bindable(default_bind_host(opts.hostname, opts.single_node), opts);
}

std::optional<gloo_backend> gloo_backend::split(const std::vector<int>& members,
                                                const std::string& name) {
  if (members.empty()) return std::nullopt;
  const int me = detail::position_in(members, rank_, gloo_backend::name);
  gloo_options o = state_->opts;
  o.prefix.clear();  // a fresh counter under the sub-group's keys
  return gloo_backend(std::make_shared<prefix_store>(state_->prefix + "/split/" + name, state_->kv),
                      me, static_cast<int>(members.size()), o);
}

std::shared_ptr<store> gloo_backend::group_store() const {
  return std::make_shared<prefix_store>(state_->prefix + "/group/", state_->kv);
}

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
  const std::chrono::duration<double> timeout =
      opts.timeout ? *opts.timeout : config::from_env().timeout;
  if (!kv) {
    if (size != 1) {
      throw invalid_argument_error("gloo: a world of " + std::to_string(size) +
                                   " ranks needs a store (bootstrap() gives one)");
    }
    kv = std::make_shared<hash_store>(timeout);
  }
  state_->kv = kv;
  const std::string host = default_bind_host(opts.hostname, opts.single_node);
  check_bindable(host, opts);  // before any key: every rank says why alike
  std::string prefix = opts.prefix;
  if (prefix.empty()) {
    // Every rank creates its communicators in the same order, so the n-th one of each rank
    // gets the same prefix.
    const auto n = kv->add("distcomm/gloo/count/" + std::to_string(rank), 1);
    prefix = "distcomm/gloo/" + std::to_string(n);
  }
  state_->prefix = prefix;
  state_->opts = opts;
  state_->opts.timeout = timeout;

  gloo::transport::tcp::attr attr;
  if (::if_nametoindex(host.c_str()) != 0) {
    attr.iface = host;
  } else {
    attr.hostname = host;
  }
  const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  state_->rank = rank;
  state_->size = size;
  state_->timeout = timeout;
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
    throw backend_error(gloo_backend::name, "connectFullMesh", 0, e.what());
  }
  if (!state_->transport) {
    throw backend_error(gloo_backend::name, "connectFullMesh", 0,
                        "the context does not use the tcp transport");
  }
  // A rank whose connections are all up may return, use the backend and drop it before a slower
  // peer got its own connect call in; that peer would then find the connection closed and fail
  // to construct. Nobody leaves before every rank is connected.
  if (size > 1) store_barrier(*kv, prefix + "/connected", rank, size);
}

gloo_request gloo_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  return send(data, bytes, peer, tag, false);
}

gloo_request gloo_backend::send(const void* data, std::size_t bytes, int peer, tag_t tag,
                                bool notice) {
  state_->throw_if_aborted();
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error("gloo: isend to rank " + std::to_string(peer) + " from rank " +
                                 std::to_string(rank_) + " in a world of " + std::to_string(size_));
  }
  // No op: a small send, complete at once (the backend sends its own copy; gloo_p2p.cpp).
  auto op = state_->post_send(data, bytes, peer, tag, notice);
  return op ? gloo_request(state_, std::move(op)) : gloo_request();
}

void gloo_backend::send_detached(const void* data, std::size_t bytes, int peer, tag_t tag) {
  if (bytes > detail::eager_bytes) {
    throw invalid_argument_error("gloo: send_detached of " + std::to_string(bytes) +
                                 " bytes: at most " + std::to_string(detail::eager_bytes));
  }
  // A small send is complete at once: the request is empty.
  (void)send(data, bytes, peer, tag, /*notice=*/true);
}

gloo_request gloo_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  return irecv_up_to(data, bytes, nullptr, peer, tag);
}

gloo_request gloo_backend::irecv_up_to(void* data, std::size_t bytes, std::size_t* got, int peer,
                                       tag_t tag) {
  state_->throw_if_aborted();
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw invalid_argument_error("gloo: irecv from rank " + std::to_string(peer) + " on rank " +
                                 std::to_string(rank_) + " in a world of " + std::to_string(size_));
  }
  return gloo_request(state_, state_->post_recv(data, bytes, peer, tag, got));
}

gloo_request gloo_backend::irecv_any(void* data, std::size_t bytes, int* source, tag_t tag) {
  state_->throw_if_aborted();
  return gloo_request(state_, state_->post_recv(data, bytes, -1, tag, nullptr, source));
}

void gloo_backend::abort(const std::string& reason) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(state_->failure_mutex);
      if (state_->aborted.load()) return;
      state_->abort_reason = reason;
      state_->aborted = true;
    }
    state_->mark_job_failed();
    const detail::sigpipe_guard no_sigpipe;
    if (state_->transport) {
      std::vector<int> everyone(static_cast<std::size_t>(size_));
      std::iota(everyone.begin(), everyone.end(), 0);
      state_->send_notices(reason, everyone);
    }
    // Closing the connections makes the peers' pending transfers fail at once, also inside
    // gloo's own collectives, which never look at the notices.
    if (state_->context) {
      state_->context->closeConnections();
      state_->connections_closed = true;
    }
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
    throw backend_error(gloo_backend::name, what, 0, e.what());
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

gloo_backend gloo_backend::connect(const config& cfg, const job* given) {
  gloo_options o;
  o.timeout = cfg.timeout;
  if (!cfg.iface.empty()) o.hostname = bind_host(cfg.iface);  // refused here if this host lacks it
  check_interface(o);  // a wrong DISTCOMM_IFACE: refused on every rank before they meet
  return gloo_backend(given ? *given : shared_bootstrap(cfg), o);
}

}  // namespace distcomm
