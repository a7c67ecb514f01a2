// communicator<Backend, Strategy, Fusion>: the one entry point an application uses. It validates
// every call, gives it a deadline (DISTCOMM_TIMEOUT), and runs it through the strategy (which
// algorithm) over the backend (which transport); grouped allreduces go through the fusion policy.
// Before a collective moves data, the ranks agree on a fingerprint of the call (check/agree.hpp):
// ranks that disagree (another collective, dtype, count, op, root or order) all get a
// mismatch_error instead of wrong data or a hang. After a collective fails, the communicator
// aborts the backend (so the other ranks fail fast too) and refuses further calls with an error
// of the first failure's kind. Every collective also comes non-blocking (iallreduce, ...),
// returning a work; both forms run the same code, in the order they were started
// (async/progress.hpp). A flight recorder keeps the last collectives for distcomm-trace
// (trace/flight_recorder.hpp).
//
// Its parts, under communicator/: traits.hpp (what it asks of its policies), state.hpp (what it
// holds), list.hpp (the collectives, written once), validation.hpp and collectives.hpp (each
// call's checks, fingerprint and body), pipeline.hpp (check, record, time, run) and groups.hpp
// (split, subset, split_by_node, shrink).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/async/work.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/backend_check.hpp"
#include "distcomm/communicator/collectives.hpp"
#include "distcomm/communicator/groups.hpp"
#include "distcomm/communicator/list.hpp"
#include "distcomm/communicator/pipeline.hpp"
#include "distcomm/communicator/state.hpp"
#include "distcomm/communicator/traits.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/log.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace distcomm {

template <class Backend, class Strategy = strategy::automatic, class Fusion = fusion::buffer>
class communicator : public detail::groups<communicator<Backend, Strategy, Fusion>> {
  static_assert(check_backend<Backend>());  // names the member of the contract a backend lacks
  using state = detail::communicator_state<Backend, Strategy, Fusion>;
  friend class detail::groups<communicator>;

 public:
  using backend_type = Backend;
  using strategy_type = Strategy;
  using fusion_type = Fusion;

  explicit communicator(Backend backend, config cfg = config::from_env())
      : communicator(std::move(backend), std::move(cfg), std::nullopt) {}
  // With the strategy `make(settings)` returns, for one that holds more than settings
  // (strategy::hierarchical); `settings` are cfg with the backend's defaults filled in.
  // Sub-communicators make theirs from the settings alone.
  communicator(Backend backend, config cfg, const std::function<Strategy(const config&)>& make)
      : s_(std::make_unique<state>(std::move(backend), std::move(cfg), std::nullopt, &make)) {
    set_log_level(s_->cfg.log);
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
    return detail::with_backend_defaults<Backend>(std::move(c));
  }

  int rank() const { return get().backend.rank(); }
  int size() const { return get().backend.size(); }
  // The names programs print and accept: "gloo", "ring" (backend_traits.hpp,
  // strategy/identity.hpp). A strategy over levels of other backends names them
  // (strategy::hierarchical: "shm+gloo").
  const char* backend_name() const noexcept { return s_->backend_name(); }
  static const char* strategy_name() { return detail::strategy_name_of<Strategy>(); }
  Backend& backend() noexcept { return s_->backend; }
  const config& settings() const noexcept { return s_->cfg; }
  Strategy& strategy() noexcept { return s_->strategy; }
  Fusion& fusion() noexcept { return s_->fusion; }

  // The collectives and point-to-point messages, each blocking and non-blocking (i...):
  // communicator/list.hpp says what each does.
#define DISTCOMM_TYPED_CALL(name, parameters, arguments)                   \
  void name parameters {                                                   \
    const detail::agreed_call promise = take_agreed();                     \
    run(build().name arguments, promise);                                  \
  }                                                                        \
  work i##name parameters {                                                \
    const detail::agreed_call promise = take_agreed();                     \
    return post(build(true).name arguments, promise);                      \
  }
#define DISTCOMM_TYPED_FORM(name, parameters, arguments) \
  void name parameters { name arguments; }               \
  work i##name parameters { return i##name arguments; }
  DISTCOMM_COLLECTIVES(DISTCOMM_TYPED_CALL, DISTCOMM_DEFAULT)
  DISTCOMM_COLLECTIVE_FORMS(DISTCOMM_TYPED_FORM, DISTCOMM_DEFAULT)
#undef DISTCOMM_TYPED_CALL
#undef DISTCOMM_TYPED_FORM

  // The first tag of users' messages; below it, the collectives' own (backend.hpp).
  static constexpr tag_t user_tag_base = distcomm::user_tag_base;

  // Sub-communicators and shrink(): communicator/groups.hpp.

  // Waits until every collective started so far has completed (their errors stay with their
  // works).
  void synchronize() { get().progress.drain(); }

  // Collectives started on this communicator so far (the sequence number of the next one).
  std::uint64_t calls() const noexcept { return s_ ? s_->check.calls() : 0; }
  // Agreements on a call's fingerprint this communicator exchanged so far (check/agree.hpp).
  std::uint64_t agreements() const noexcept { return s_ ? s_->check.agreements() : 0; }
  // Of those, the ones exchanged while the call's first messages travelled (check/gate.hpp:
  // backends whose agreement is an exchange of their own messages).
  std::uint64_t overlapped_agreements() const noexcept { return s_ ? s_->check.overlapped() : 0; }

  // The caller has made sure, on every rank alike, that the next collective it starts on this
  // communicator is the same call with the same arguments on every rank: that collective runs
  // without an agreement of its own. The engine does so for the collectives its negotiation
  // (itself a collective of this communicator, agreed with the settings) has planned alike on
  // every rank: one agreement per cycle. Every rank calls it before the same collective; a
  // program that cannot promise that must not call it (without an agreement, ranks in different
  // calls fail at the deadline or worse). With `until`, that collective also ends by `until`
  // where that is sooner than its own deadline (DISTCOMM_TIMEOUT from its start): a collective
  // run inside another one under the outer call's deadline, as the levels of a hierarchical
  // allreduce are (init/'s hierarchical).
  void next_call_agreed(deadline until = deadline::max()) noexcept {
    if (s_) s_->next_call = {true, until};
  }

  // Whether retune() can change this communicator's settings: its strategy and fusion policy can
  // be made anew (cuda::fusion, which holds device memory, cannot).
  static constexpr bool retunable =
      std::is_move_assignable_v<Strategy> && std::is_constructible_v<Strategy, const config&> &&
      std::is_move_assignable_v<Fusion> && std::is_constructible_v<Fusion, const config&>;

  // The settings retune() changes, as they stand: the fusion threshold and cut-off, the segment
  // size and strategy::automatic's table as it resolves on this backend (another strategy: the
  // configured table).
  tuning current_tuning() {
    state& s = get("current_tuning");
    tuning t;
    s.progress.run("current_tuning", [&] {
      t.fusion_threshold = s.cfg.fusion_threshold;
      t.fusion_cutoff = s.cfg.fusion_cutoff.value_or(0);
      t.segment_bytes = s.cfg.segment_bytes.value_or(0);
      if constexpr (std::is_base_of_v<strategy::automatic, Strategy>) {
        t.algo = s.strategy.template table<Backend>();
      } else {
        t.algo = s.cfg.algo;
      }
      if constexpr (detail::has_retuned<Strategy>::value) s.strategy.describe(t);
    });
    return t;
  }

  // The collectives started after this call use `t`: the strategy and the fusion policy are made
  // anew from the settings with t's values (settings() shows them). Every rank must call it with
  // the same `t` between the same two collectives: the mismatch check names a rank that did not
  // at the next collective (without the check, ranks pipelining in different segments fail or
  // hang). The engine's autotuner does so (autotune/tuner.hpp).
  void retune(const tuning& t) {
    if constexpr (!retunable) {
      throw invalid_argument_error(std::string("retune: the strategy or fusion policy of this '") +
                                   backend_name() + "' communicator cannot be made anew");
    } else {
      if (!valid_segment_bytes(t.segment_bytes)) {
        throw invalid_argument_error("retune: segment size " + std::to_string(t.segment_bytes) +
                                     " is outside 64 bytes .. 1G");
      }
      state& s = get("retune");
      s.progress.run("retune", [&] {
        config c = s.cfg;
        c.fusion_threshold = t.fusion_threshold;
        c.fusion_cutoff = t.fusion_cutoff;
        c.segment_bytes = t.segment_bytes;
        c.algo = t.algo;
        if constexpr (detail::has_retuned<Strategy>::value) {
          s.strategy = s.strategy.retuned(c, t);
        } else {
          s.strategy = Strategy(c);
        }
        s.fusion = Fusion(c);
        if constexpr (detail::fusion_traces<Fusion>::value) {
          if (s.timeline) s.fusion.trace_to(s.timeline, s.track);
        }
        s.check.retune(check::settings_of(c, detail::strategy_identity(s.strategy).c_str()));
        s.cfg = std::move(c);
      });
    }
  }

 private:
  // `id` names a sub-communicator's recorder after its parent's; a communicator made from a
  // backend gets the process's next name (trace::next_recorder_identity()).
  communicator(Backend backend, config cfg, std::optional<trace::flight_recorder::identity> id)
      : s_(std::make_unique<state>(std::move(backend), std::move(cfg), std::move(id))) {
    set_log_level(s_->cfg.log);  // DISTCOMM_LOG is read with the rest of the configuration
  }

  // The builders; `queued` for the non-blocking forms (collectives.hpp).
  detail::collectives<state> build(bool queued = false) const {
    return detail::collectives<state>(get(), queued);
  }
  // next_call_agreed()'s promise, taken by the call it was made for (also when that call is
  // refused before it runs).
  detail::agreed_call take_agreed() noexcept {
    return s_ ? std::exchange(s_->next_call, detail::agreed_call{}) : detail::agreed_call{};
  }
  template <class Body>
  void run(detail::call<Body> c, const detail::agreed_call& promise) {
    c.promise = promise;
    detail::pipeline<state>::run(get(c.what), std::move(c));
  }
  template <class Body>
  work post(detail::call<Body> c, const detail::agreed_call& promise) {
    c.promise = promise;
    return detail::pipeline<state>::post(get(c.what), std::move(c));
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

  std::unique_ptr<state> s_;
};

}  // namespace distcomm
