// The call pipeline: what every call goes through once it is validated. In order with the
// communicator's other calls (async/progress.hpp), under one deadline (DISTCOMM_TIMEOUT): the
// agreement on the call's fingerprint (check/agree.hpp), recorded (trace/flight_recorder.hpp) and
// timed (trace/timeline.hpp), then its body. A failure makes the communicator unusable, aborts
// the backend so that the other ranks fail fast too, and is raised again, by kind, by every call
// after it.
#pragma once

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/async/progress.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/communicator/state.hpp"
#include "distcomm/communicator/traits.hpp"
#include "distcomm/core/coarse_clock.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/algorithms/exchange.hpp"
#include "distcomm/trace/flight_recorder.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm::detail {

// One call, validated: its name, its fingerprint and what it does, body(state, until). A body
// that posts messages (point-to-point) returns their requests instead of waiting for them.
// A collective may also name its data, which the agreement carries where it is small
// (check/carried.hpp): the body then does not run.
template <class Body>
struct call {
  const char* what;
  check::call_fingerprint fp;
  Body body;
  check::carried_call carried{};
  agreed_call promise{};  // communicator::next_call_agreed()
};
template <class Body>
call<Body> make_call(const char* what, const check::call_fingerprint& fp, Body body,
                     check::carried_call carried = {}) {
  return {what, fp, std::move(body), carried};
}

template <class State>
struct pipeline {
  using requests = std::vector<typename State::backend_type::request>;
  template <class Body>
  static constexpr bool posts_messages =
      std::is_same_v<std::invoke_result_t<Body&, State&, deadline>, requests>;

  // The blocking form: returns when the call completed (its messages too).
  template <class Body>
  static void run(State& s, call<Body> c) {
    if constexpr (posts_messages<Body>) {
      auto body = [&](State& st, deadline until) {
        for (auto& r : c.body(st, until)) r.wait(until);
      };
      s.progress.run(c.what, [&] { guarded(s, c.what, c.fp, body, {}, nullptr, c.promise); });
    } else {
      s.progress.run(c.what, [&] { guarded(s, c.what, c.fp, c.body, {}, &c.carried, c.promise); });
    }
  }

  // The non-blocking form: a work at once. Messages are left in flight for the progress thread
  // to poll, the calls after them starting meanwhile. Past the deadline, the request's wait()
  // raises the transport's timeout, naming the peer; a failure leaves the communicator unusable,
  // as in a collective.
  template <class Body>
  static work post(State& s, call<Body> c) {
    if constexpr (posts_messages<Body>) {
      return s.progress.post_in_flight(
          [&s, c = std::move(c), posted_at = posted_now(s)]() mutable -> poll_fn {
            auto posted = std::make_shared<requests>();
            deadline until{};
            auto post = [&](State& st, deadline u) {
              until = u;
              *posted = c.body(st, u);
            };
            guarded(s, c.what, c.fp, post, posted_at, nullptr, c.promise);
            if (posted->empty()) return {};
            return [&s, what = c.what, posted, until]() -> bool {
              try {
                for (auto& r : *posted) {
                  if (r.test()) continue;
                  if (clock::now() < until) return false;
                  r.wait(until);
                }
                return true;
              } catch (const std::exception& e) {
                fail(s, what, e);
                throw;
              }
            };
          });
    } else {
      return s.progress.post([&s, c = std::move(c), posted = posted_now(s)]() mutable {
        guarded(s, c.what, c.fp, c.body, posted, &c.carried, c.promise);
      });
    }
  }

  // Called while `e` is being handled: remembers it as the first failure and aborts the backend,
  // so the other ranks' waits end at once.
  static void fail(State& s, const char* what, const std::exception& e, bool abort = true) {
    const std::string prefix = std::string(what) + ": ";
    const std::string text = e.what();
    s.failure = text.compare(0, prefix.size(), prefix) == 0 ? text : prefix + text;
    s.first_failure = std::current_exception();
    if (abort) s.backend.abort(s.failure);
  }

  // After a failure: `what` refused, as the kind of the first failure, so that code catching
  // timeout_error or peer_lost_error around every call also catches the calls after it.
  static void refuse_after_failure(const State& s, const char* what) {
    if (!s.first_failure) return;
    const std::string message = std::string(what) +
                                ": this communicator is unusable since an earlier collective "
                                "failed: " +
                                s.failure;
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

 private:
  // Runs one call: agreement on `fp` first, then `body`, under one deadline. A mismatch the
  // agreement finds leaves the communicator usable: no data moved, and every rank raised the same
  // error after the same exchange, so the next call pairs up as usual. Any other failure (and a
  // peer that left) makes it unusable.
  // A blocking call's `posted` is its start (no clock reading).
  template <class Body>
  static void guarded(State& s, const char* what, const check::call_fingerprint& fp, Body& body,
                      trace::flight_recorder::time_point posted, check::carried_call* carried,
                      const agreed_call& promise) {
    refuse_after_failure(s, what);
    const deadline started = coarse_now();  // the deadline's and the recorder's
    const deadline until = std::min(deadline_after(started, s.cfg.timeout), promise.until);
    const span_on_exit traced{s, what, fp};
    // Through one function that is not a template (the recorder's), so that each collective's
    // code is compiled once.
    auto run = [&] { checked(s, what, fp, body, until, carried, promise.agreed); };
    const bool collective = fp.kind != static_cast<std::uint32_t>(check::call_kind::point_to_point);
    trace::flight_recorder::record(
        collective ? s.recorder.get() : nullptr, s.check.calls(), what, fp, posted, started,
        s.cfg.dump_dir, [](void* f) { (*static_cast<decltype(run)*>(f))(); }, &run);
  }

  // When a call was posted, for the flight recorder (not read without one).
  static trace::flight_recorder::time_point posted_now(const State& s) {
    return s.recorder ? trace::flight_recorder::now() : trace::flight_recorder::time_point{};
  }

  // What the call check may carry of `c`: null where there is nothing, or where the strategy
  // would refuse the call (its body raises that error then).
  static check::carried_call* carriable(State& s, check::carried_call* c) {
    if (!c || c->count == 0) return nullptr;
    using Strategy = std::decay_t<decltype(s.strategy)>;
    using Backend = typename State::backend_type;
    if constexpr (vets_carried<Strategy, Backend>::value) {
      if (c->what == check::carried_call::collective::allreduce &&
          !s.strategy.template accepts_carried<Backend>(c->bytes())) {
        return nullptr;
      }
    }
    return c;
  }

  // The agreement of a call whose strategy runs behind the gate (check/gate.hpp): run by the gate
  // when the strategy first needs it, with the sends it made before.
  struct gated_agreement {
    State* s;
    const check::call_fingerprint* fp;
    const char* what;
    deadline until;
    bool failed = false;  // whether the body's failure is the agreement's
    static void run(void* self, const std::vector<check::early_send>& sent) {
      auto* a = static_cast<gated_agreement*>(self);
      try {
        a->s->check.agree(a->s->backend, *a->fp, a->what, a->until, nullptr, &sent);
      } catch (const mismatch_error&) {
        a->failed = true;
        // Every rank drained the early sends, unless one left (nobody takes them then).
        if (!a->s->check.peer_left()) a->s->gate.settle_early_sends();
        throw;
      } catch (...) {
        a->failed = true;
        throw;
      }
    }
  };

  // Runs `agree`, an agreement. A mismatch it finds leaves the communicator usable: no data moved,
  // and every rank raised the same error after the same exchange, so the next call pairs up as
  // usual; but a departure leaves it unusable, with nothing to abort (the ranks still here learn
  // it from the same exchange, and an abort could close a connection before this rank's last
  // message of the exchange left). Any other failure makes it unusable.
  template <class F>
  static void agreeing(State& s, const char* what, F&& agree) {
    try {
      agree();
    } catch (const mismatch_error& e) {
      if (s.check.peer_left()) fail(s, what, e, /*abort=*/false);
      throw;
    } catch (const std::exception& e) {
      fail(s, what, e);
      throw;
    }
  }

  // guarded()'s agreement and body.
  template <class Body>
  static void checked(State& s, const char* what, const check::call_fingerprint& fp, Body& body,
                      deadline until, check::carried_call* carried, bool agreed) {
    gated_agreement later{&s, &fp, what, until};
    bool carried_done = false;
    agreeing(s, what, [&] {
      if (agreed) {
        s.check.skip();
      } else if (fp.kind != static_cast<std::uint32_t>(check::call_kind::point_to_point)) {
        check::carried_call* c = carriable(s, carried);
        if constexpr (State::gated_calls) {
          const int p = s.backend.size();
          if (s.check.exchanges(p) && !s.check.carries(p, c)) {
            s.check.begin(s.backend, fp);
            s.gate.arm({&gated_agreement::run, &later});
          }
        }
        if (!s.gate_armed()) {
          s.check.agree(s.backend, fp, what, until, c);
          carried_done = carried && carried->done;
        }
      }
    });
    if (carried_done) return;
    try {
      body(s, until);
      if constexpr (State::gated_calls) s.gate.open();  // the agreement, if the body needed none
      s.check.complete_deferred(s.backend);             // likewise, if the body carried none
    } catch (const invalid_argument_error&) {
      // A bad call on this rank leaves the transport untouched (the strategies refuse before
      // their first message); an agreement begun is completed, so that the next call's pairs up.
      if constexpr (State::gated_calls) {
        if (s.gate.armed()) agreeing(s, what, [&] { s.gate.open(); });
      }
      (void)s.check.deferred_mismatch(s.backend);
      throw;
    } catch (const strategy::detail::agreed_mismatch_error&) {
      throw;  // every rank raised it after the same exchange, nothing moved (alltoallv's counts)
    } catch (const mismatch_error& e) {
      // The agreement the gate ran or the backend carried in the collective's first exchange:
      // as above.
      if (later.failed || s.check.deferred_mismatch(s.backend)) {
        if (s.check.peer_left()) fail(s, what, e, /*abort=*/false);
        throw;
      }
      fail(s, what, e);
      throw;
    } catch (const std::exception& e) {
      if (s.gate_armed()) s.gate.disarm();
      (void)s.check.deferred_mismatch(s.backend);
      fail(s, what, e);
      throw;
    }
  }

  // With DISTCOMM_TIMELINE set, each call is one span of the communicator's track.
  struct span_on_exit {
    State& s;
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
};

}  // namespace distcomm::detail
