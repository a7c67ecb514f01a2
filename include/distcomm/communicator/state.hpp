// What a communicator<Backend, Strategy, Fusion> holds, behind one pointer so that a move hands
// it over whole (collectives still running keep running on it): the backend, the settings, the
// strategy and fusion policy made from them, the call check, the trace outputs and the progress
// queue every collective runs on.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/async/progress.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/communicator/traits.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/survivors.hpp"
#include "distcomm/trace/flight_recorder.hpp"
#include "distcomm/trace/timeline.hpp"

namespace distcomm::detail {

// communicator::next_call_agreed()'s promise for one call: no agreement of its own, and done by
// `until` when that is sooner than its own deadline.
struct agreed_call {
  bool agreed = false;
  deadline until = deadline::max();
};

template <class Backend, class Strategy, class Fusion>
struct communicator_state {
  using backend_type = Backend;
  using fusion_type = Fusion;
  // A backend moves either host memory or (moves_device_memory, e.g. NCCL) CUDA memory.
  static constexpr bool moves_device = moves_device_memory<Backend>::value;
  static constexpr memory_kind moved = moves_device ? memory_kind::cuda : memory_kind::host;
  // Whether the strategy runs behind the gate that overlaps each call's agreement with its first
  // messages (check/gate.hpp).
  static constexpr bool gated_calls = check::gates<Backend> && overlaps_agreement<Strategy>::value;
  using gate_type = std::conditional_t<gated_calls, check::gated<Backend>, check::no_gate>;

  // `id` names a sub-communicator's recorder after its parent's; without one the process's next
  // name (trace::next_recorder_identity()). `make`, when given, makes the strategy from the
  // settings.
  communicator_state(Backend b, config c, std::optional<trace::flight_recorder::identity> id,
                     const std::function<Strategy(const config&)>* make = nullptr)
      : backend(std::move(b)),
        cfg(with_backend_defaults<Backend>(with_runtime_defaults(backend, std::move(c)))),
        strategy(make != nullptr ? (*make)(cfg) : Strategy(cfg)),
        fusion(cfg),
        check(cfg.mismatch_check && !moves_device,
              check::settings_of(cfg, strategy_identity(strategy).c_str())),
        timeline(trace::timeline::open(cfg.timeline, backend.rank())) {
    check.watch_stalls(backend.rank(), cfg.stall_warning);
    if constexpr (has_split<Backend>::value && has_group_store<Backend>::value) {
      // Where the store can tell when this process ends, shrink() need not wait out its window
      // for it (rendezvous/survivors.hpp). A backend without a store has nothing to say it in.
      if (backend.size() > 1) {
        try {
          if (auto kv = backend.group_store()) hold_membership(*kv, backend.rank());
        } catch (const invalid_argument_error&) {
        }
      }
    }
    if (cfg.flight_recorder != 0) {
      if (!id) id = trace::next_recorder_identity(backend.rank(), backend.size());
      id->backend = backend_name_of(backend);
      id->strategy = strategy_name_of<Strategy>();
      id->timeout = cfg.timeout;
      recorder = trace::flight_recorder::make(cfg.flight_recorder, std::move(*id));
    }
    if (timeline) {
      track = timeline->track(std::string("collectives (") + backend_name_of(backend) + ", " +
                              strategy_name_of<Strategy>() + ")");
      if constexpr (fusion_traces<Fusion>::value) fusion.trace_to(timeline, track);
    }
  }

  // The name programs print: the backend's, or the one a strategy over levels of other backends
  // gives (strategy::hierarchical: "shm+gloo").
  const char* backend_name() const noexcept {
    if constexpr (has_backend_name<Strategy>::value) {
      if (const char* n = strategy.backend_name()) return n;
    }
    return backend_name_of(backend);
  }

  // The backend as the strategy sees it: behind the gate where calls go through one.
  auto& for_strategy() noexcept {
    if constexpr (gated_calls) {
      return gate;
    } else {
      return backend;
    }
  }

  // Whether a call's agreement waits behind the gate.
  bool gate_armed() const noexcept {
    if constexpr (gated_calls) {
      return gate.armed();
    } else {
      return false;
    }
  }

  Backend backend;
  config cfg;
  Strategy strategy;
  Fusion fusion;
  check::call_check<Backend> check;
  gate_type gate{backend};
  std::string failure;                        // "<collective>: <what()>" of the first failure
  std::exception_ptr first_failure;           // set with failure; its type is rethrown
  std::shared_ptr<trace::timeline> timeline;  // DISTCOMM_TIMELINE, else null
  std::shared_ptr<trace::flight_recorder> recorder;  // DISTCOMM_FLIGHT_RECORDER, else null
  int track = 0;
  std::uint64_t splits = 0;             // sub-communicators made so far: their names
  std::uint64_t shrinks = 0;            // shrink() calls so far: their keys in the store
  detail::agreed_call next_call{};      // next_call_agreed(), on the caller's thread
  distcomm::detail::progress progress;  // last: stopped (queue run) before the rest goes
};

}  // namespace distcomm::detail
