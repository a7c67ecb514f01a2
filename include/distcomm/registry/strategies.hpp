// The strategies by name: the one list of them, the names and aliases programs accept, and a
// visitor that calls a generic function with the strategy's type. Every tool, example, benchmark
// and test that takes a strategy by name goes through it, so a new strategy is its identity
// (strategy/identity.hpp) and one line here.
//   distcomm::visit_strategy<Backend>("ring", [&](auto tag) {
//     using S = typename decltype(tag)::type;   // distcomm::strategy::ring
//     ...
//   });
#pragma once

#include <cstddef>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/registry/table.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/identity.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/parameter_server.hpp"
#include "distcomm/strategy/recursive_doubling.hpp"
#include "distcomm/strategy/ring.hpp"
#include "distcomm/strategy/tree.hpp"

namespace distcomm {

// A strategy's names: `name` is what programs print and accept first, `alias` (may be empty) is
// accepted too (the type's own name where it differs).
struct strategy_info {
  const char* name;
  const char* alias;
  const char* summary;
};

namespace detail {

template <class S>
struct strategy_entry {
  using type = S;
  strategy_info info;
};

// The entry of strategy S: its names and summary are its identity's (strategy/identity.hpp).
template <class S>
constexpr strategy_entry<S> entry_of() {
  return {{info_of(S::id).name, info_of(S::id).alias, info_of(S::id).summary}};
}

// The strategies a program can name, in the order of --help texts and of the README
// (strategy::hierarchical is not one: init() makes it for a job across hosts).
inline constexpr auto strategy_table =
    std::make_tuple(entry_of<strategy::automatic>(), entry_of<strategy::ring>(),
                    entry_of<strategy::tree>(), entry_of<strategy::recursive_doubling>(),
                    entry_of<strategy::parameter_server>(), entry_of<strategy::native>());

template <class F>
void for_each_strategy_entry(F&& f) {
  for_each_entry(strategy_table, std::forward<F>(f));
}

inline bool names_strategy(const strategy_info& s, const std::string& name) {
  return name == s.name || (*s.alias != '\0' && name == s.alias);
}

}  // namespace detail

// True when strategy S runs on backend B: native needs the backend's own allreduce, and on a
// backend that moves device memory the point-to-point strategies need its memory operations.
template <class S, class B>
inline constexpr bool strategy_runs_on_v = std::is_same_v<S, strategy::native>
                                               ? has_native_allreduce_v<B>
                                               : (!detail::moves_device_memory<B>::value ||
                                                  detail::has_memory_ops<B>::value);

// The registry's name of strategy type S ("rd" for strategy::recursive_doubling), or nullptr when S
// is not in the registry (a strategy of the application's own).
template <class S>
const char* registered_name() {
  const char* n = nullptr;
  detail::for_each_strategy_entry([&](const auto& e) {
    if (std::is_same_v<typename std::decay_t<decltype(e)>::type, S>) n = e.info.name;
  });
  return n;
}

// Every strategy, in the registry's order.
inline const std::vector<strategy_info>& strategies() {
  static const std::vector<strategy_info> all =
      detail::infos_of<strategy_info>(detail::strategy_table);
  return all;
}

// The strategies that run on backend B.
template <class B>
std::vector<strategy_info> strategies_for() {
  std::vector<strategy_info> v;
  detail::for_each_strategy_entry([&](const auto& e) {
    if (strategy_runs_on_v<typename std::decay_t<decltype(e)>::type, B>) v.push_back(e.info);
  });
  return v;
}

// The registry's name of a strategy given by name or alias; invalid_argument_error when none.
inline const strategy_info& find_strategy(const std::string& name) {
  for (const strategy_info& s : strategies()) {
    if (detail::names_strategy(s, name)) return s;
  }
  throw invalid_argument_error("unknown strategy '" + name +
                               "'; the strategies are: " + join_names(strategies()));
}

// Calls f(type_tag<S>{}) with the strategy named `name` (name or alias) and returns its result.
// invalid_argument_error when no strategy has that name, or when it does not run on backend B
// (`backend_name` names B in the message; native on a backend without native collectives).
template <class B, class F>
auto visit_strategy(const std::string& name, F&& f, const char* backend_name = B::name) {
  using result = decltype(f(type_tag<strategy::ring>{}));
  const strategy_info& wanted = find_strategy(name);
  detail::visit_result<result> out;
  bool found = false;
  detail::for_each_strategy_entry([&](const auto& e) {
    using S = typename std::decay_t<decltype(e)>::type;
    // By text: the same literal may have a different address in each translation unit.
    if (found || std::strcmp(wanted.name, e.info.name) != 0) return;
    found = true;
    if constexpr (strategy_runs_on_v<S, B>) {
      out.call(f, type_tag<S>{});
    } else {
      throw invalid_argument_error(
          std::string("strategy ") + e.info.name + ": backend '" + backend_name +
          "' cannot run it" +
          (std::is_same_v<S, strategy::native> ? " (it has no native allreduce)" : "") +
          "; use one of: " + join_names(strategies_for<B>()));
    }
  });
  if (!found) throw error("strategy registry: no entry named '" + std::string(wanted.name) + "'");
  return out.take();
}

}  // namespace distcomm
