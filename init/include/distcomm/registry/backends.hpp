// The backends by name: those this DistComm was built with (distcomm/backends/built.hpp, written
// by the build from its one list), each as its header declares it (B::traits, backend_traits.hpp)
// and made by its own B::connect(); the rule init() follows when none is named; and a visitor
// that calls a generic function with the backend's type:
//   distcomm::visit_backend("gloo", cfg, [&](auto make) {
//     using B = decltype(make());               // distcomm::gloo_backend
//     distcomm::communicator<B> comm(make(), cfg);
//   });
// Needs DistComm::DistComm (every built backend). distcomm::init() (init.hpp) is built on it.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend_traits.hpp"
#include "distcomm/backends/built.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/plugin/loader.hpp"
#include "distcomm/plugin/plugin_backend.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

// A backend as help texts, error messages and the rules below see it: name and summary (as
// join_names() reads them) and the whole declaration.
struct backend_info {
  const char* name;
  const char* summary;
  backend_traits traits;
};

namespace detail {

template <class B>
constexpr backend_info info_of() {
  return {B::traits.name(), B::traits.summary(), B::traits};
}

// f(type_tag<B>{}) for every built backend B, in the build list's order.
template <class F, class... B>
void for_each_built(backend_list<B...>, F&& f) {
  (f(type_tag<B>{}), ...);
}
template <class F>
void for_each_built_backend(F&& f) {
  for_each_built(built_backend_list{}, std::forward<F>(f));
}

// What visit_backend() hands its function: make() returns a new backend of type B, made by
// B::connect() for this rank of the launched job (of `given` when not null).
template <class B>
struct backend_maker {
  const config* cfg;
  const job* given;
  B operator()() const { return B::connect(*cfg, given); }
};

}  // namespace detail

// Every backend this DistComm was built with, in the build list's order.
inline const std::vector<backend_info>& built_backends() {
  static const std::vector<backend_info> all = [] {
    std::vector<backend_info> v;
    detail::for_each_built_backend(
        [&](auto tag) { v.push_back(detail::info_of<typename decltype(tag)::type>()); });
    return v;
  }();
  return all;
}

// The built backend named `name`, or nullptr.
inline const backend_info* find_built_backend(const std::string& name) {
  for (const backend_info& b : built_backends()) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

inline bool is_built_backend(const std::string& name) {
  return find_built_backend(name) != nullptr;
}

// The names a program can take: the built backends, then the plugins on the search path whose
// name no built backend has (plugin:<name> reaches the others).
inline std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const backend_info& b : built_backends()) names.emplace_back(b.name);
  for (const plugin::available& p : plugin::list()) {
    if (!is_built_backend(p.name)) names.push_back(p.name);
  }
  return names;
}

// What the backend `name` declares: a built backend's traits, else (and for `plugin:<name>`) the
// plugin's, loading it (plugin::traits_of says what a plugin that declares none is taken for).
// invalid_argument_error when neither exists, naming what does.
inline backend_traits traits_of(const std::string& name) {
  if (const backend_info* b = find_built_backend(name)) return b->traits;
  try {
    return plugin::traits_of(plugin::load(plugin::plugin_named(name)));
  } catch (const invalid_argument_error& e) {
    throw invalid_argument_error("backend '" + name + "' is neither built into this DistComm (" +
                                 join_names(built_backends()) +
                                 ") nor a plugin found: " + e.what());
  }
}

// Whether a backend declared as `t` can run the job `w`: it moves host memory; ranks that are
// threads make only a world of one; an MPI world's ranks are the ones an MPI launcher started;
// a single-host backend needs every rank on this host. `through_store`: the ranks meet through a
// store the program gives (init(job), the torch binding), so only a backend that meets through
// one can run them.
inline bool can_run(const backend_traits& t, const world_info& w, bool through_store = false) {
  if (t.memory() != memory_kind::host) return false;
  if (!t.can(capability::processes)) return w.size <= 1;
  if (t.can(capability::mpi_world) && !started_by_mpi(w.launcher)) return false;
  if (through_store && !t.can(capability::store)) return false;
  return !t.can(capability::single_host) || w.single_node();
}

// The backend distcomm::init() takes when none is named, for a job as detect_world() sees it:
// of the built backends that can run it (can_run), the one whose declaration ranks it first
// (backend_traits::default_rank: a world of one gets local; mpirun's ranks mpi; one host's shm;
// then gloo, then ucx; docs/PERFORMANCE.md, "Which backend by default", says why).
inline std::string default_backend(const world_info& w, bool through_store = false) {
  const backend_info* best = nullptr;
  for (const backend_info& b : built_backends()) {
    const int rank = b.traits.default_rank();
    if (rank > 0 && can_run(b.traits, w, through_store) &&
        (best == nullptr || rank < best->traits.default_rank())) {
      best = &b;
    }
  }
  if (best != nullptr) return best->name;
  throw invalid_argument_error(
      "no backend that can run this job was built into this DistComm (built: " +
      join_names(built_backends()) + ") and " + to_string(w.launcher) + " started " +
      std::to_string(w.size) + " ranks" +
      (through_store ? " meeting through the program's store" : "") +
      "; rebuild with gloo, ucx or MPI installed, or load a plugin with DISTCOMM_BACKEND");
}

// The backend the ranks of one host use inside a hierarchical job: of the built backends whose
// ranks are processes of one host meeting through the job's store, the first by default rank;
// "" when none was built.
inline std::string intra_host_backend() {
  const backend_info* best = nullptr;
  for (const backend_info& b : built_backends()) {
    const backend_traits& t = b.traits;
    if (t.memory() == memory_kind::host && t.default_rank() > 0 &&
        t.can(capability::processes | capability::store | capability::single_host) &&
        (best == nullptr || t.default_rank() < best->traits.default_rank())) {
      best = &b;
    }
  }
  return best != nullptr ? best->name : "";
}

// Calls f(make) with a callable `make` that returns a new backend of the type named `name` for
// this rank of the launched job (of `given` when not null), and returns f's result: a built
// backend's own type, else (and for `plugin:<name>`) plugin_backend over the plugin of that name.
// invalid_argument_error when neither exists, naming what does.
template <class F>
auto visit_backend(const std::string& name, const config& cfg, F&& f, const job* given = nullptr) {
  using result = decltype(f(std::declval<detail::backend_maker<local_backend>>()));
  detail::visit_result<result> out;
  bool found = false;
  detail::for_each_built_backend([&](auto tag) {
    using B = typename decltype(tag)::type;
    if (found || name != B::name) return;
    found = true;
    out.call(f, detail::backend_maker<B>{&cfg, given});
  });
  if (!found) {
    const std::string plugin = plugin::plugin_named(name);
    plugin::library lib;
    try {
      lib = plugin::load(plugin);  // loaded now, so a missing plugin fails before f runs
    } catch (const invalid_argument_error& e) {
      throw invalid_argument_error("backend '" + name + "' is neither built into this DistComm (" +
                                   join_names(built_backends()) +
                                   ") nor a plugin found: " + e.what());
    }
    struct plugin_maker {
      std::string name;
      const config* cfg;
      const job* given;
      plugin_backend operator()() const {
        return given ? plugin_backend::open(name, *given, *cfg) : plugin_backend::open(name, *cfg);
      }
    };
    out.call(f, plugin_maker{lib.path(), &cfg, given});
  }
  return out.take();
}

}  // namespace distcomm
