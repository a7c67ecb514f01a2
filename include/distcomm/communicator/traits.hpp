// What communicator<Backend, Strategy, Fusion> asks of its policies, detected at compile time:
// how a Fusion policy is called and traced, and what a Strategy says about itself (its name, its
// identity, its backend's name, how it is retuned). A policy without the member gets the default.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/strategy/identity.hpp"
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

// A strategy with state of its own besides the settings (strategy::hierarchical: the levels it
// runs large allreduces over, and their threshold) says what else the ranks must share,
// `std::string identity() const`, and is retuned rather than made anew:
// `S retuned(const config& c, const tuning& t) const`, and `void describe(tuning&) const` adds its
// settings to current_tuning().
template <class S, class = void>
struct has_identity : std::false_type {};
template <class S>
struct has_identity<S, std::void_t<decltype(std::declval<const S&>().identity())>>
    : std::true_type {};
template <class S>
std::string strategy_identity(const S& s) {
  if constexpr (has_identity<S>::value) {
    return s.identity();
  } else {
    return strategy_name<S>::value;
  }
}
// `template <class B> bool accepts_carried(std::size_t bytes)`: false where the strategy refuses
// an allreduce of `bytes` by its settings (strategy::native in deterministic mode; automatic with a
// table naming native on a backend without one). The call check then does not carry it, and the
// strategy's body raises the error as it does at any size.
template <class S, class B, class = void>
struct vets_carried : std::false_type {};
template <class S, class B>
struct vets_carried<
    S, B, std::void_t<decltype(std::declval<S&>().template accepts_carried<B>(std::size_t{}))>>
    : std::true_type {};

// A strategy whose alltoallv takes `bool counts_agreed` last: the call check compared the counts
// already (every built-in one; an application's own strategy need not).
template <class S, class B, class = void>
struct takes_agreed_counts : std::false_type {};
template <class S, class B>
struct takes_agreed_counts<
    S, B,
    std::void_t<decltype(std::declval<S&>().alltoallv(
        std::declval<B&>(), nullptr, static_cast<const std::size_t*>(nullptr),
        static_cast<const std::size_t*>(nullptr), nullptr, static_cast<const std::size_t*>(nullptr),
        static_cast<const std::size_t*>(nullptr), dtype::f32, deadline{}, true))>>
    : std::true_type {};

// A strategy declaring `static constexpr bool overlaps_agreement = true` writes into the
// caller's buffers only through the memory operations policy (strategy/detail.hpp, memory_of), so
// its calls may agree while their first messages travel (check/gate.hpp).
template <class S, class = void>
struct overlaps_agreement : std::false_type {};
template <class S>
struct overlaps_agreement<S, std::enable_if_t<S::overlaps_agreement>> : std::true_type {};

template <class S, class = void>
struct has_backend_name : std::false_type {};
template <class S>
struct has_backend_name<S, std::void_t<decltype(std::declval<const S&>().backend_name())>>
    : std::true_type {};
template <class S, class = void>
struct has_retuned : std::false_type {};
template <class S>
struct has_retuned<S, std::void_t<decltype(std::declval<const S&>().retuned(
                          std::declval<const config&>(), std::declval<const tuning&>()))>>
    : std::true_type {};

// The name programs print and accept for the strategy ("ring", strategy/identity.hpp).
template <class S>
const char* strategy_name_of() {
  if constexpr (has_algorithm_id<S>::value) {
    return name_of(S::id);
  } else {
    return strategy_name<S>::value;
  }
}

// The settings in use: `c` with what it left to the backend filled in (segment_bytes_for and
// fusion_cutoff_for, backend.hpp).
template <class B>
config with_backend_defaults(config c) {
  if (!c.fusion_cutoff) c.fusion_cutoff = fusion_cutoff_for<B>;
  if (!c.segment_bytes) c.segment_bytes = segment_bytes_for<B>;
  return c;
}

}  // namespace detail

}  // namespace distcomm
