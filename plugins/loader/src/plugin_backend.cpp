// plugin_backend: the calls through the plugin's table, the store offered to it, its log lines,
// and the ring fallback for the collectives it lacks.
#include "distcomm/plugin/plugin_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/abi.hpp"
#include "distcomm/plugin/store_abi.hpp"
#include "distcomm/plugin/store_plugin.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "distcomm/strategy/ring.hpp"

namespace distcomm {
namespace detail {

// The store offered to a plugin, made by its source on first use.
struct lazy_store {
  plugin_backend::store_source source;
  std::once_flag once;
  std::shared_ptr<store> kv;

  store& get() {
    std::call_once(once, [&] {
      if (source) kv = source();
    });
    if (!kv) {
      throw invalid_argument_error(
          "this world has no store (a world of one, or a program that "
          "offers its plugin none)");
    }
    return *kv;
  }
};

struct plugin_state {
  plugin::library lib;
  const distcomm_backend_v1* t = nullptr;
  std::string name;
  std::shared_ptr<lazy_store> kv;
  distcomm_store_v1 c_store{};
  void* ctx = nullptr;
  config cfg;
  std::optional<strategy::ring> fallback;

  ~plugin_state() {
    if (ctx != nullptr) t->finalize(ctx);
  }

  strategy::ring& ring() {
    if (!fallback) fallback.emplace(cfg);
    return *fallback;
  }

  // Throws the exception of a failed call `routine`, its text prefixed with the plugin's name
  // unless the plugin said it already.
  [[noreturn]] void fail(int status, const char* routine, const distcomm_error_v1& err) const {
    std::string text = plugin::error_text(err);
    if (text.empty()) text = std::string(routine) + " failed (" + plugin::status_name(status) + ")";
    if (text.compare(0, name.size() + 1, name + ":") != 0) text = name + ": " + text;
    plugin::throw_status(status, name, routine, text);
  }
  void check(int status, const char* routine, const distcomm_error_v1& err) const {
    if (status != DISTCOMM_V1_OK) fail(status, routine, err);
  }

  // A value the plugin returned that no working transport can: a named error, never used.
  [[noreturn]] void refuse(const char* routine, const std::string& what) const {
    throw backend_error(name, routine, -1,
                        "backend plugin " + lib.path() + " ('" + name + "') " + what +
                            ": the plugin is broken; fix it or use another backend");
  }

  // A posted request: the handle of an isend or irecv that returned OK.
  distcomm_request_v1* posted(int status, const char* routine, const distcomm_error_v1& err,
                              distcomm_request_v1* r) const {
    check(status, routine, err);
    if (r == nullptr)
      refuse(routine, std::string("returned OK from ") + routine + " without a request");
    return r;
  }
};

namespace {

// The C callbacks of the store offered to plugins.
lazy_store& of(void* user) { return *static_cast<lazy_store*>(user); }
store& made(void* user) { return of(user).get(); }
using offered = plugin::store_calls<&made>;

void store_mark_failed(void* user) {
  lazy_store& s = of(user);
  if (s.kv) s.kv->mark_job_failed();  // never made: nothing to mark
}

}  // namespace
}  // namespace detail

// ---- requests -----------------------------------------------------------------------------------

plugin_request::plugin_request(plugin_request&& other) noexcept
    : state_(std::move(other.state_)), req_(std::exchange(other.req_, nullptr)) {}

plugin_request& plugin_request::operator=(plugin_request&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    req_ = std::exchange(other.req_, nullptr);
  }
  return *this;
}

plugin_request::~plugin_request() { release(); }

void plugin_request::release() noexcept {
  if (req_ != nullptr) state_->t->free_request(state_->ctx, req_);  // cancels a pending one
  req_ = nullptr;
}

bool plugin_request::test() {
  if (req_ == nullptr) return true;
  plugin::error_buffer err;
  const int s = state_->t->test(state_->ctx, req_, &err);
  if (s == DISTCOMM_V1_PENDING) return false;
  state_->check(s, "test", err);
  release();
  return true;
}

void plugin_request::wait(deadline until) {
  if (req_ == nullptr) return;
  plugin::error_buffer err;
  state_->check(state_->t->wait(state_->ctx, req_, plugin::to_ns(until), &err), "wait", err);
  release();
}

// ---- the backend --------------------------------------------------------------------------------

plugin_backend::plugin_backend(std::shared_ptr<detail::plugin_state> s)
    : state_(std::move(s)),
      rank_(state_->t->rank(state_->ctx)),
      size_(state_->t->size(state_->ctx)) {
  if (size_ < 1) state_->refuse("size", "reports a world of " + std::to_string(size_) + " ranks");
  if (rank_ < 0 || rank_ >= size_) {
    state_->refuse("rank", "reports rank " + std::to_string(rank_) + " in a world of " +
                               std::to_string(size_) + " ranks");
  }
}

namespace {
plugin_backend::args args_of(const world_info& w, plugin_backend::store_source kv,
                             const config& cfg) {
  plugin_backend::args a;
  a.rank = w.rank;
  a.size = w.size;
  a.local_rank = w.local_rank;
  a.local_size = w.local_size;
  a.kv = std::move(kv);
  a.options = cfg.plugin_options;
  return a;
}
}  // namespace

plugin_backend plugin_backend::open(const std::string& name, const config& cfg) {
  plugin::enable_store_plugins();
  auto kv = [cfg] { return shared_bootstrap(cfg).kv; };
  return open(name, args_of(detect_world(), kv, cfg), cfg);
}

plugin_backend plugin_backend::open(const std::string& name, const job& j, const config& cfg) {
  auto kv = [kv = j.kv] { return kv; };
  return open(name, args_of(j.world, kv, cfg), cfg);
}

plugin_backend plugin_backend::open(const std::string& name, const args& a, const config& cfg) {
  auto s = std::make_shared<detail::plugin_state>();
  s->lib = plugin::load(name);
  s->t = &s->lib.table();
  s->name = s->lib.name();
  s->cfg = cfg;
  if ((s->t->flags & DISTCOMM_V1_DEVICE_MEMORY) != 0) {
    throw invalid_argument_error(
        "backend plugin " + s->lib.path() + " ('" + s->name +
        "') moves CUDA device memory, which plugin_backend does not carry (its strategies reduce "
        "host memory): link that backend into the program (DistComm::" +
        s->name + ") instead of loading it");
  }
  s->kv = std::make_shared<detail::lazy_store>();
  s->kv->source = a.kv;
  s->c_store.user = s->kv.get();
  s->c_store.set = &detail::offered::set;
  s->c_store.get = &detail::offered::get;
  s->c_store.add = &detail::offered::add;
  s->c_store.check = &detail::offered::check;
  s->c_store.mark_failed = &detail::store_mark_failed;

  distcomm_init_args_v1 init{};
  init.struct_size = sizeof init;
  init.rank = a.rank;
  init.size = a.size;
  init.local_rank = a.local_rank;
  init.local_size = a.local_size;
  init.log_level = static_cast<int>(current_log_level());
  init.timeout_s = cfg.timeout.count();
  init.log = &plugin::log_line;
  init.log_user = nullptr;
  init.store = a.kv ? &s->c_store : nullptr;
  init.options = a.options.empty() ? nullptr : a.options.c_str();
  plugin::error_buffer err;
  void* ctx = nullptr;
  const int status = s->t->init(&ctx, &init, &err);
  if (status != DISTCOMM_V1_OK) {
    std::string why = err.text[0] != '\0' ? plugin::error_text(err) : plugin::status_name(status);
    plugin::throw_status(status, s->name, "init",
                         "backend plugin " + s->lib.path() + " ('" + s->name +
                             "') failed to initialise rank " + std::to_string(a.rank) + " of " +
                             std::to_string(a.size) + ": " + why);
  }
  s->ctx = ctx;
  log(log_level::debug,
      "plugin " + s->name + " loaded from " + s->lib.path() + " (" + s->lib.symbol() + ")");
  return plugin_backend(std::move(s));
}

const std::string& plugin_backend::instance_name() const noexcept { return state_->name; }
const std::string& plugin_backend::path() const noexcept { return state_->lib.path(); }

plugin_request plugin_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  plugin::error_buffer err;
  distcomm_request_v1* r = nullptr;
  const int status = state_->t->isend(state_->ctx, data, bytes, peer, tag, &r, &err);
  return plugin_request(state_, state_->posted(status, "isend", err, r));
}

plugin_request plugin_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  plugin::error_buffer err;
  distcomm_request_v1* r = nullptr;
  const int status = state_->t->irecv(state_->ctx, data, bytes, peer, tag, &r, &err);
  return plugin_request(state_, state_->posted(status, "irecv", err, r));
}

void plugin_backend::send_detached(const void* data, std::size_t bytes, int peer, tag_t tag) {
  if (state_->t->send_detached != nullptr) {
    plugin::error_buffer err;
    state_->check(state_->t->send_detached(state_->ctx, data, bytes, peer, tag, &err),
                  "send_detached", err);
    return;
  }
  // Small messages leave at once on a network transport; the limit guards a wedged one. Nobody
  // waits for this send: one that cannot leave (its peer is gone or stuck) is dropped.
  try {
    isend(data, bytes, peer, tag).wait(deadline_after(std::chrono::milliseconds(200)));
  } catch (const timeout_error&) {
  } catch (const peer_lost_error&) {
  }
}

void plugin_backend::abort(const std::string& reason) noexcept {
  state_->t->abort(state_->ctx, reason.c_str());
}

bool plugin_backend::unreceived_messages_ok_now() const noexcept {
  return (state_->t->flags & DISTCOMM_V1_UNRECEIVED_MESSAGES_OK) != 0;
}

void plugin_backend::fill_defaults(config& c) {
  const distcomm_backend_v1& t = *state_->t;
  if (c.algo.empty() && t.default_algo != nullptr) {
    c.algo = algo_table::parse(t.default_algo, state_->name + " default table");
  }
  if (!c.segment_bytes && t.default_segment_bytes != 0) c.segment_bytes = t.default_segment_bytes;
  if (!c.fusion_cutoff && t.default_fusion_cutoff != 0) c.fusion_cutoff = t.default_fusion_cutoff;
  state_->cfg = c;
  state_->fallback.reset();  // made again with these settings when needed
}

bool plugin_backend::plugin_has(const char* collective) const noexcept {
  const std::string c = collective;
  const distcomm_backend_v1& t = *state_->t;
  return (c == "allreduce" && t.allreduce) || (c == "reduce_scatter" && t.reduce_scatter) ||
         (c == "allgather" && t.allgather) || (c == "broadcast" && t.broadcast) ||
         (c == "barrier" && t.barrier) || (c == "send_detached" && t.send_detached);
}

namespace {
// The plugin's reduction may serve: it exists, and it reduces in rank order if asked to.
bool usable(const void* f, const detail::plugin_state& s) {
  return f != nullptr &&
         (!s.cfg.deterministic || (s.t->flags & DISTCOMM_V1_NATIVE_DETERMINISTIC) != 0);
}
}  // namespace

void plugin_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                      reduce_op op, deadline until) {
  auto& s = *state_;
  if (!usable(reinterpret_cast<const void*>(s.t->allreduce), s)) {
    return s.ring().allreduce(*this, in, out, count, t, op, until);
  }
  plugin::error_buffer err;
  s.check(s.t->allreduce(s.ctx, in, out, count, static_cast<int>(t), static_cast<int>(op),
                         plugin::to_ns(until), &err),
          "allreduce", err);
}

void plugin_backend::native_reduce_scatter(const void* in, void* out, std::size_t recv_count,
                                           dtype t, reduce_op op, deadline until) {
  auto& s = *state_;
  if (!usable(reinterpret_cast<const void*>(s.t->reduce_scatter), s)) {
    return s.ring().reduce_scatter(*this, in, out, recv_count, t, op, until);
  }
  plugin::error_buffer err;
  s.check(s.t->reduce_scatter(s.ctx, in, out, recv_count, static_cast<int>(t), static_cast<int>(op),
                              plugin::to_ns(until), &err),
          "reduce_scatter", err);
}

void plugin_backend::native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                                      deadline until) {
  auto& s = *state_;
  if (s.t->allgather == nullptr) return s.ring().allgather(*this, in, out, send_count, t, until);
  plugin::error_buffer err;
  s.check(
      s.t->allgather(s.ctx, in, out, send_count, static_cast<int>(t), plugin::to_ns(until), &err),
      "allgather", err);
}

void plugin_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                      deadline until) {
  auto& s = *state_;
  if (s.t->broadcast == nullptr) return s.ring().broadcast(*this, data, count, t, root, until);
  plugin::error_buffer err;
  s.check(s.t->broadcast(s.ctx, data, count, static_cast<int>(t), root, plugin::to_ns(until), &err),
          "broadcast", err);
}

void plugin_backend::native_barrier(deadline until) {
  auto& s = *state_;
  if (s.t->barrier == nullptr) return s.ring().barrier(*this, until);
  plugin::error_buffer err;
  s.check(s.t->barrier(s.ctx, plugin::to_ns(until), &err), "barrier", err);
}

}  // namespace distcomm
