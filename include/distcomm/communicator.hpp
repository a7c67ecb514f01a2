// communicator<Backend, Strategy, Fusion>: the one entry point an application uses. It validates
// every call, gives it a deadline (DISTCOMM_TIMEOUT), and runs it through the strategy (which
// algorithm) over the backend (which transport); grouped allreduces go through the fusion policy.
// Before a collective moves data, the ranks agree on a fingerprint of the call (check/agree.hpp):
// ranks that disagree (another collective, dtype, count, op, root or order) all get a
// mismatch_error instead of wrong data or a hang. After a collective fails, the communicator
// aborts the backend (so the other ranks fail fast too) and refuses further calls with an error
// of the first failure's kind. Every collective also comes non-blocking (iallreduce, ...),
// returning a work; both forms run the same code, in the order they were started
// (async/progress.hpp).
#pragma once

#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/async/progress.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/log.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm {

namespace detail {
// A Fusion policy declaring `static constexpr bool takes_backend = true` (cuda::fusion) is called
// as allreduce(backend, tensors, op, deadline, run), to work on the backend's stream and wait for
// it; the others as allreduce(tensors, op, run).
template <class F, class = void>
struct fusion_takes_backend : std::false_type {};
template <class F>
struct fusion_takes_backend<F, std::enable_if_t<F::takes_backend>> : std::true_type {};

// A Fusion policy with trace_to(timeline, track) draws its packing on the timeline.
template <class F, class = void>
struct fusion_traces : std::false_type {};
template <class F>
struct fusion_traces<
    F, std::void_t<decltype(std::declval<F&>().trace_to(std::shared_ptr<trace::timeline>(), 0))>>
    : std::true_type {};

// The strategy's `name`, part of the settings every rank must share.
template <class S, class = void>
struct strategy_name {
  static constexpr const char* value = "(unnamed strategy)";
};
template <class S>
struct strategy_name<S, std::void_t<decltype(S::name)>> {
  static constexpr const char* value = S::name;
};

}  // namespace detail

template <class Backend, class Strategy = strategy::automatic, class Fusion = fusion::buffer>
class communicator {
  static_assert(check_backend<Backend>());  // names the member of the contract a backend lacks
  struct state;

 public:
  using backend_type = Backend;
  using strategy_type = Strategy;
  using fusion_type = Fusion;

  explicit communicator(Backend backend, config cfg = config::from_env())
      : s_(std::make_unique<state>(std::move(backend), std::move(cfg))) {
    set_log_level(s_->cfg.log);  // DISTCOMM_LOG is read with the rest of the configuration
  }

  // A move hands over the whole state (and collectives still running keep running on it).
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      close();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Waits for the collectives still running (each has its deadline). Ranks that still call
  // collectives on this communicator learn that this one left (a mismatch_error naming it and how
  // many collectives it made) instead of waiting for it.
  ~communicator() { close(); }

  // The settings in use: the configuration given, with what it left to the backend filled in
  // (segment_bytes_for and fusion_cutoff_for, backend.hpp).
  static config with_backend_defaults(config c) {
    if (!c.fusion_cutoff) c.fusion_cutoff = fusion_cutoff_for<Backend>;
    if (!c.segment_bytes) c.segment_bytes = segment_bytes_for<Backend>;
    return c;
  }

  int rank() const { return get().backend.rank(); }
  int size() const { return get().backend.size(); }
  // The names programs print and accept: "gloo", "ring" (registry/strategies.hpp).
  const char* backend_name() const noexcept { return detail::backend_name_of(s_->backend); }
  static const char* strategy_name() {
    const char* n = registered_name<Strategy>();
    return n ? n : detail::strategy_name<Strategy>::value;
  }
  Backend& backend() noexcept { return s_->backend; }
  const config& settings() const noexcept { return s_->cfg; }
  Strategy& strategy() noexcept { return s_->strategy; }
  Fusion& fusion() noexcept { return s_->fusion; }

  // Every collective has a blocking form and a non-blocking one (i...), which returns a work at
  // once (async/work.hpp). Both validate their arguments on the caller's thread (a bad argument
  // throws from the call itself) and run the same code, one collective at a time in the order
  // they were started (async/progress.hpp). The memory of a non-blocking call must stay alive
  // until its work completes.

  // In place: every rank's `data` becomes the reduction of all ranks' `data`.
  void allreduce(tensor_view data, reduce_op op = reduce_op::sum) { allreduce(data, data, op); }
  work iallreduce(tensor_view data, reduce_op op = reduce_op::sum) {
    return iallreduce(data, data, op);
  }

  // Out of place: `out` becomes the reduction of every rank's `in`. `in` is only read.
  void allreduce(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    run(allreduce_call(in, out, op));
  }
  work iallreduce(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    return post(allreduce_call(in, out, op));
  }

  // Grouped allreduce of a whole gradient set, in place, fused by the Fusion policy.
  void allreduce(span<const tensor_view> tensors, reduce_op op = reduce_op::sum) {
    run(grouped_call(tensors, op));
  }
  work iallreduce(span<const tensor_view> tensors, reduce_op op = reduce_op::sum) {
    // The views are copied: the caller's list may go before the collective runs.
    auto views = std::make_shared<std::vector<tensor_view>>(tensors.begin(), tensors.end());
    return post(grouped_call(span<const tensor_view>(views->data(), views->size()), op), views);
  }

  // `in` holds size() blocks of out.count elements; rank r receives the reduction of block r.
  void reduce_scatter(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    run(reduce_scatter_call(in, out, op));
  }
  work ireduce_scatter(tensor_view in, tensor_view out, reduce_op op = reduce_op::sum) {
    return post(reduce_scatter_call(in, out, op));
  }

  // `out` holds size() blocks of in.count elements, block r from rank r.
  void allgather(tensor_view in, tensor_view out) { run(allgather_call(in, out)); }
  work iallgather(tensor_view in, tensor_view out) { return post(allgather_call(in, out)); }

  // Every rank's `data` becomes root's `data`.
  void broadcast(tensor_view data, int root) { run(broadcast_call(data, root)); }
  work ibroadcast(tensor_view data, int root) { return post(broadcast_call(data, root)); }

  // With the mismatch check on, the agreement that precedes every collective is a barrier by
  // itself (no rank leaves it before every rank entered it): nothing more is sent.
  void barrier() { run(barrier_call()); }
  work ibarrier() { return post(barrier_call()); }

  // Waits until every collective started so far has completed (their errors stay with their
  // works).
  void synchronize() { get().progress.drain(); }

  // Collectives started on this communicator so far (the sequence number of the next one).
  std::uint64_t calls() const noexcept { return s_ ? s_->check.calls() : 0; }

 private:
  static constexpr bool moves_device = detail::moves_device_memory<Backend>::value;

  struct state {
    state(Backend b, config c)
        : backend(std::move(b)),
          cfg(with_backend_defaults(detail::with_runtime_defaults(backend, std::move(c)))),
          strategy(cfg),
          fusion(cfg),
          check(cfg.mismatch_check && !moves_device,
                check::settings_of(cfg, detail::strategy_name<Strategy>::value)),
          timeline(trace::timeline::open(cfg.timeline, backend.rank())) {
      check.watch_stalls(backend.rank(), cfg.stall_warning);
      if (timeline) {
        track = timeline->track(std::string("collectives (") + detail::backend_name_of(backend) +
                                ", " + strategy_name() + ")");
        if constexpr (detail::fusion_traces<Fusion>::value) fusion.trace_to(timeline, track);
      }
    }
    Backend backend;
    config cfg;
    Strategy strategy;
    Fusion fusion;
    check::call_check<Backend> check;
    std::string failure;                        // "<collective>: <what()>" of the first failure
    std::exception_ptr first_failure;           // set with failure; its type is rethrown
    std::shared_ptr<trace::timeline> timeline;  // DISTCOMM_TIMELINE, else null
    int track = 0;
    detail::progress progress;  // last: stopped (queue run) before the rest goes
  };

  // One collective, validated: its name, its fingerprint and what it does, body(state, until).
  template <class Body>
  struct call {
    const char* what;
    check::call_fingerprint fp;
    Body body;
  };
  template <class Body>
  static call<Body> make_call(const char* what, const check::call_fingerprint& fp, Body body) {
    return {what, fp, std::move(body)};
  }

  template <class Body>
  void run(call<Body> c) {
    state& s = get(c.what);
    s.progress.run(c.what, [&] { guarded(s, c.what, c.fp, c.body); });
  }
  template <class Body, class... Keep>
  work post(call<Body> c, Keep... keep) {
    state& s = get(c.what);
    return s.progress.post(
        [&s, c = std::move(c), keep...]() mutable { guarded(s, c.what, c.fp, c.body); });
  }

  auto allreduce_call(tensor_view in, tensor_view out, reduce_op op) const {
    check_tensor("allreduce input", in);
    check_tensor("allreduce output", out);
    check_op(op);
    check_pair("allreduce", in, out, in.count, in.count);
    return make_call("allreduce", fingerprint(check::call_kind::allreduce, in.count, in.type, op),
                     [in, out, op](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.allreduce(s.backend, in.data, out.data, in.count, in.type, op,
                                            until);
                     });
  }

  auto grouped_call(span<const tensor_view> tensors, reduce_op op) const {
    for (const tensor_view& t : tensors) check_tensor("grouped allreduce tensor", t);
    check_op(op);
    if constexpr (moves_device && std::is_same_v<Fusion, fusion::buffer>) {
      // fusion::buffer packs with host copies; device tensors need a device-side packer.
      throw invalid_argument_error(std::string("grouped allreduce: backend '") + Backend::name +
                                   "' moves device memory, which fusion::buffer cannot pack; "
                                   "use communicator<..., cuda::fusion> (from "
                                   "<distcomm/cuda/fusion.hpp>) or fusion::none");
    }
    const auto fp =
        check::grouped_fingerprint(tensors, static_cast<int>(op), get().check.settings());
    return make_call("grouped allreduce", fp, [tensors, op](state& s, deadline until) {
      const auto one = [&](const void* in, void* out, std::size_t count, dtype t, reduce_op o) {
        s.strategy.allreduce(s.backend, in, out, count, t, o, until);
      };
      if constexpr (detail::fusion_takes_backend<Fusion>::value) {
        s.fusion.allreduce(s.backend, tensors, op, until, one);  // e.g. on the backend's stream
      } else {
        s.fusion.allreduce(tensors, op, one);
      }
    });
  }

  auto reduce_scatter_call(tensor_view in, tensor_view out, reduce_op op) const {
    check_tensor("reduce_scatter input", in);
    check_tensor("reduce_scatter output", out);
    check_op(op);
    check_pair("reduce_scatter", in, out, checked_mul(out.count, "reduce_scatter"), out.count);
    return make_call(
        "reduce_scatter", fingerprint(check::call_kind::reduce_scatter, out.count, in.type, op),
        [in, out, op](state& s, deadline until) {
          if (out.count == 0) return;
          s.strategy.reduce_scatter(s.backend, in.data, out.data, out.count, in.type, op, until);
        });
  }

  auto allgather_call(tensor_view in, tensor_view out) const {
    check_tensor("allgather input", in);
    check_tensor("allgather output", out);
    check_pair("allgather", in, out, in.count, checked_mul(in.count, "allgather"));
    return make_call("allgather", fingerprint(check::call_kind::allgather, in.count, in.type),
                     [in, out](state& s, deadline until) {
                       if (in.count == 0) return;
                       s.strategy.allgather(s.backend, in.data, out.data, in.count, in.type, until);
                     });
  }

  auto broadcast_call(tensor_view data, int root) const {
    check_tensor("broadcast buffer", data);
    if (root < 0 || root >= size()) {
      throw invalid_argument_error("broadcast: root " + std::to_string(root) +
                                   " is not a rank (world size " + std::to_string(size()) + ")");
    }
    return make_call(
        "broadcast", fingerprint(check::call_kind::broadcast, data.count, data.type, {}, root),
        [data, root](state& s, deadline until) {
          if (data.count == 0) return;
          s.strategy.broadcast(s.backend, data.data, data.count, data.type, root, until);
        });
  }

  auto barrier_call() const {
    return make_call("barrier", fingerprint(check::call_kind::barrier),
                     [](state& s, deadline until) {
                       if (!s.check.exchanges(s.backend.size()))
                         s.strategy.barrier(s.backend, until);
                     });
  }

  state& get(const char* what = "communicator") const {
    if (!s_) throw error(std::string(what) + ": this communicator was moved from");
    return *s_;
  }

  // Runs what is still queued, then says goodbye (see ~communicator).
  void close() noexcept {
    if (!s_) return;
    s_->progress.stop();
    if (!s_->first_failure) s_->check.leave(s_->backend);
  }

  check::call_fingerprint fingerprint(check::call_kind kind, std::size_t count = 0,
                                      std::optional<dtype> t = {}, std::optional<reduce_op> op = {},
                                      int root = -1) const {
    return check::make_fingerprint(kind, get().check.settings(), count,
                                   t ? static_cast<int>(*t) : -1, op ? static_cast<int>(*op) : -1,
                                   root);
  }

  // Runs one collective: agreement on `fp` first, then `body`, under one deadline. A mismatch the
  // agreement finds leaves the communicator usable: no data moved, and every rank raised the same
  // error after the same exchange, so the next call pairs up as usual. Any other failure (and a
  // peer that left) makes it unusable.
  template <class Body>
  static void guarded(state& s, const char* what, const check::call_fingerprint& fp, Body& body) {
    if (s.first_failure) {
      rethrow_failure(s, std::string(what) +
                             ": this communicator is unusable since an earlier "
                             "collective failed: " +
                             s.failure);
    }
    const deadline until = deadline_after(s.cfg.timeout);
    const span_on_exit traced{s, what, fp};
    try {
      s.check.agree(s.backend, fp, what, until);
    } catch (const mismatch_error& e) {
      // A departure: unusable from now on, but nothing to abort. The ranks still here learn it
      // from the same exchange, and an abort could close a connection before this rank's last
      // message of the exchange left.
      if (s.check.peer_left()) fail(s, what, e, /*abort=*/false);
      throw;
    } catch (const std::exception& e) {
      fail(s, what, e);
      throw;
    }
    try {
      body(s, until);
    } catch (const invalid_argument_error&) {
      throw;  // a bad call on this rank leaves the transport untouched
    } catch (const std::exception& e) {
      fail(s, what, e);
      throw;
    }
  }

  // With DISTCOMM_TIMELINE set, each collective is one span of the communicator's track.
  struct span_on_exit {
    state& s;
    const char* what;
    const check::call_fingerprint& fp;
    trace::timeline::time_point begin =
        s.timeline ? trace::timeline::now() : trace::timeline::time_point{};
    ~span_on_exit() {
      if (!s.timeline) return;
      std::string args = "\"seq\": " + std::to_string(s.check.calls() - 1) +
                         ", \"count\": " + std::to_string(fp.count);
      if (fp.type >= 0) args += std::string(", \"dtype\": \"") + to_string(dtype(fp.type)) + "\"";
      if (fp.op >= 0) args += std::string(", \"op\": \"") + to_string(reduce_op(fp.op)) + "\"";
      if (fp.root >= 0) args += ", \"root\": " + std::to_string(fp.root);
      if (fp.tensors > 0) args += ", \"tensors\": " + std::to_string(fp.tensors);
      s.timeline->span(s.track, what, "collective", begin, trace::timeline::now(), args);
    }
  };

  // Called while `e` is being handled: remembers it as the first failure and aborts the backend,
  // so the other ranks' waits end at once.
  static void fail(state& s, const char* what, const std::exception& e, bool abort = true) {
    const std::string prefix = std::string(what) + ": ";
    const std::string text = e.what();
    s.failure = text.compare(0, prefix.size(), prefix) == 0 ? text : prefix + text;
    s.first_failure = std::current_exception();
    if (abort) s.backend.abort(s.failure);
  }

  // Throws `message` as the kind of the first failure, so that code catching timeout_error or
  // peer_lost_error around every call also catches the calls after it.
  [[noreturn]] static void rethrow_failure(const state& s, const std::string& message) {
    try {
      std::rethrow_exception(s.first_failure);
    } catch (const timeout_error&) {
      throw timeout_error(message);
    } catch (const peer_lost_error&) {
      throw peer_lost_error(message);
    } catch (const mismatch_error&) {
      throw mismatch_error(message);
    } catch (const backend_error& e) {
      throw backend_error(e.backend(), e.routine(), e.code(), message);
    } catch (...) {
      throw error(message);
    }
  }

  void check_tensor(const char* what, const tensor_view& t) const {
    if (!is_valid(t.type)) {
      throw invalid_argument_error(std::string(what) + ": invalid dtype value " +
                                   std::to_string(static_cast<int>(t.type)));
    }
    if (t.data == nullptr && t.count != 0) {
      throw invalid_argument_error(std::string(what) + ": data is null but count is " +
                                   std::to_string(t.count));
    }
    if (t.count > std::numeric_limits<std::size_t>::max() / dtype_size(t.type)) {
      throw invalid_argument_error(std::string(what) + ": " + std::to_string(t.count) +
                                   " elements of " + to_string(t.type) +
                                   " overflow the address space");
    }
    // A backend moves either host memory or (moves_device_memory, e.g. NCCL) CUDA memory.
    const memory_kind moved = moves_device ? memory_kind::cuda : memory_kind::host;
    if (t.memory != moved) {
      throw invalid_argument_error(std::string(what) + ": tensor in " + to_string(t.memory) +
                                   " memory, but backend '" + backend_name() + "' moves " +
                                   to_string(moved) + " memory only");
    }
  }

  static void check_op(reduce_op op) {
    if (!is_valid(op)) {
      throw invalid_argument_error("invalid reduce_op value " +
                                   std::to_string(static_cast<int>(op)));
    }
  }

  // `in` and `out` must share a dtype and have the expected element counts.
  static void check_pair(const char* what, const tensor_view& in, const tensor_view& out,
                         std::size_t in_count, std::size_t out_count) {
    if (in.type != out.type) {
      throw invalid_argument_error(std::string(what) + ": input is " + to_string(in.type) +
                                   " but output is " + to_string(out.type));
    }
    if (in.count != in_count) {
      throw invalid_argument_error(std::string(what) + ": input has " + std::to_string(in.count) +
                                   " elements, expected " + std::to_string(in_count));
    }
    if (out.count != out_count) {
      throw invalid_argument_error(std::string(what) + ": output has " + std::to_string(out.count) +
                                   " elements, expected " + std::to_string(out_count));
    }
  }

  std::size_t checked_mul(std::size_t count, const char* what) const {
    const auto p = static_cast<std::size_t>(size());
    if (count > std::numeric_limits<std::size_t>::max() / p) {
      throw invalid_argument_error(std::string(what) + ": " + std::to_string(count) + " x " +
                                   std::to_string(p) + " ranks overflows size_t");
    }
    return count * p;
  }

  std::unique_ptr<state> s_;
};

}  // namespace distcomm
