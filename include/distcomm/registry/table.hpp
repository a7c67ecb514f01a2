// What the backend and strategy registries share: a registry is a tuple of entries, each with a
// `type` and an `info` (names and a summary); these walk it. Not part of the public API.
#pragma once

#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace distcomm {

// Stands for a type in a generic lambda's argument: `[](auto tag) { typename decltype(tag)::type
// }`.
template <class T>
struct type_tag {
  using type = T;
};

namespace detail {

// f(entry) for every entry of the registry `table`, in order.
template <class Table, class F>
void for_each_entry(const Table& table, F&& f) {
  std::apply([&](const auto&... e) { (f(e), ...); }, table);
}

// Every entry's info, in order.
template <class Info, class Table>
std::vector<Info> infos_of(const Table& table) {
  std::vector<Info> v;
  for_each_entry(table, [&](const auto& e) { v.push_back(e.info); });
  return v;
}

// Holds what a visitor's function returned (nothing when it returns void), so a visitor can call
// it from inside a loop over the registry and return its result after.
template <class R>
class visit_result {
 public:
  template <class F, class... A>
  void call(F&& f, A&&... a) {
    if constexpr (std::is_void_v<R>) {
      f(std::forward<A>(a)...);
    } else {
      value_.emplace(f(std::forward<A>(a)...));
    }
  }
  R take() {
    if constexpr (!std::is_void_v<R>) return std::move(*value_);
  }

 private:
  std::optional<std::conditional_t<std::is_void_v<R>, bool, R>> value_;
};

}  // namespace detail

// "auto, ring, tree": the names of a list of backend_info or strategy_info, for help texts and
// error messages.
template <class Info>
std::string join_names(const std::vector<Info>& list) {
  std::string s;
  for (const Info& i : list) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

}  // namespace distcomm
