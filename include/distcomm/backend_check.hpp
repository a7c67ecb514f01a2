// check_backend<B>(): the backend contract written at the top of backend.hpp, checked at compile
// time, each missing member named in plain words. communicator<B, ...> checks its backend with it.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/backend.hpp"

namespace distcomm {

namespace detail {

template <class, class = void>
struct has_name : std::false_type {};
template <class B>
struct has_name<B, std::enable_if_t<std::is_convertible_v<decltype(B::name), const char*>>>
    : std::true_type {};

template <class, class = void>
struct has_rank_size : std::false_type {};
template <class B>
struct has_rank_size<
    B, std::enable_if_t<std::is_convertible_v<decltype(std::declval<const B&>().rank()), int> &&
                        std::is_convertible_v<decltype(std::declval<const B&>().size()), int>>>
    : std::true_type {};

template <class, class = void>
struct has_request_type : std::false_type {};
template <class B>
struct has_request_type<B, std::void_t<typename B::request>> : std::true_type {};

template <class, class = void>
struct has_isend : std::false_type {};
template <class B>
struct has_isend<B, std::enable_if_t<std::is_same_v<decltype(std::declval<B&>().isend(
                                                        std::declval<const void*>(), std::size_t{},
                                                        int{}, tag_t{})),
                                                    typename B::request>>> : std::true_type {};

template <class, class = void>
struct has_irecv : std::false_type {};
template <class B>
struct has_irecv<
    B, std::enable_if_t<std::is_same_v<decltype(std::declval<B&>().irecv(
                                           std::declval<void*>(), std::size_t{}, int{}, tag_t{})),
                                       typename B::request>>> : std::true_type {};

template <class, class = void>
struct has_abort : std::false_type {};
template <class B>
struct has_abort<
    B, std::enable_if_t<noexcept(std::declval<B&>().abort(std::declval<const std::string&>()))>>
    : std::true_type {};

template <class, class = void>
struct request_waits : std::false_type {};
template <class R>
struct request_waits<
    R,
    std::void_t<decltype(std::declval<R&>().wait(deadline{})),
                std::enable_if_t<std::is_convertible_v<decltype(std::declval<R&>().test()), bool>>>>
    : std::true_type {};

}  // namespace detail

// Checks that B has the members of the contract at the top of backend.hpp, saying in plain words
// which one is missing. communicator<B, ...> checks its backend with it.
template <class B>
constexpr bool check_backend() {
  static_assert(std::is_move_constructible_v<B>,
                "backend contract (backend.hpp): a backend must be movable");
  static_assert(detail::has_name<B>::value,
                "backend contract (backend.hpp): the backend has no "
                "`static constexpr const char* name`");
  static_assert(detail::has_rank_size<B>::value,
                "backend contract (backend.hpp): the backend has no `int rank() const` and "
                "`int size() const`");
  static_assert(detail::has_abort<B>::value,
                "backend contract (backend.hpp): the backend has no "
                "`void abort(const std::string& reason) noexcept`");
  static_assert(detail::has_request_type<B>::value,
                "backend contract (backend.hpp): the backend has no request type "
                "(`using request = ...;`, what isend and irecv return)");
  if constexpr (detail::has_request_type<B>::value) {
    static_assert(detail::has_isend<B>::value,
                  "backend contract (backend.hpp): the backend has no "
                  "`request isend(const void* data, std::size_t bytes, int peer, tag_t tag)`");
    static_assert(detail::has_irecv<B>::value,
                  "backend contract (backend.hpp): the backend has no "
                  "`request irecv(void* data, std::size_t bytes, int peer, tag_t tag)`");
    static_assert(std::is_move_constructible_v<typename B::request> &&
                      detail::request_waits<typename B::request>::value,
                  "backend contract (backend.hpp): the backend's request must be movable and "
                  "have `bool test()` and `void wait(deadline until)`");
  }
  return true;
}

}  // namespace distcomm
