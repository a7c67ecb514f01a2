// What a backend may offer the call check (check/agree.hpp) in place of its exchange over
// point-to-point messages, detected at compile time.
#pragma once

#include <type_traits>
#include <utility>

#include "distcomm/backend.hpp"
#include "distcomm/check/fingerprint.hpp"

namespace distcomm::check {

namespace detail {
// B::request, or a placeholder for a type that only names itself a backend (tests that look at a
// communicator's static members): the members below must not need more than that.
template <class B, class = void>
struct request_of {
  struct none {};
  using type = none;
};
template <class B>
struct request_of<B, std::void_t<typename B::request>> {
  using type = typename B::request;
};
// `void native_agree(agreement& state, const char* what, deadline until)` and
// `void native_leave(const agreement& notice) noexcept`: the backend agrees through memory every
// rank maps (shm), every rank's fingerprints merged into `state` in one step.
template <class, class = void>
struct has_native_agree : std::false_type {};
template <class B>
struct has_native_agree<B,
                        std::void_t<decltype(std::declval<B&>().native_agree(
                            std::declval<agreement&>(), std::declval<const char*>(), deadline{}))>>
    : std::true_type {};
// `void defer_agreement(deferred_agreement* d) noexcept`: the backend carries the agreement in
// its next operation's first exchange (deferred_agreement, check/fingerprint.hpp).
template <class, class = void>
struct defers_agreement : std::false_type {};
template <class B>
struct defers_agreement<B, std::void_t<decltype(std::declval<B&>().defer_agreement(
                               static_cast<deferred_agreement*>(nullptr)))>> : std::true_type {};
}  // namespace detail

}  // namespace distcomm::check
