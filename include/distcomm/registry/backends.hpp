// The backends by name: the one list of those this DistComm was built with
// (distcomm/backends/built.hpp, written by the build), how each is made for one rank of the job a
// launcher started, and a visitor that calls a generic function with the backend's type:
//   distcomm::visit_backend("gloo", cfg, [&](auto make) {
//     using B = decltype(make());               // distcomm::gloo_backend
//     distcomm::communicator<B> comm(make(), cfg);
//   });
// Needs DistComm::DistComm (every built backend). distcomm::init() (init.hpp) is built on it.
#pragma once

#include <cstdlib>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backends/built.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/plugin/loader.hpp"
#include "distcomm/plugin/plugin_backend.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/interface.hpp"

#include "distcomm/backends/local.hpp"
#if DISTCOMM_BUILT_MPI
#include "distcomm/backends/mpi.hpp"
#endif
#if DISTCOMM_BUILT_GLOO
#include "distcomm/backends/gloo.hpp"
#endif
#if DISTCOMM_BUILT_UCX
#include "distcomm/backends/ucx.hpp"
#endif
#if DISTCOMM_BUILT_SHM
#include "distcomm/backends/shm.hpp"
#endif
#if DISTCOMM_BUILT_NCCL
#include "distcomm/backends/nccl.hpp"
#endif

namespace distcomm {

struct backend_info {
  const char* name;
  const char* summary;
};

namespace detail {

template <class B>
struct backend_entry {
  using type = B;
  backend_info info;
  // This rank of `given` (a job the program met itself, e.g. through a framework's store), else
  // of the job the launcher started (shared_bootstrap); cfg.timeout everywhere.
  B (*make)(const config&, const job* given);
};

// The local backend's ranks are threads of one process (local_world); as the backend of a
// launched process it can only be a world of one.
inline local_backend make_local(const config&, const job* given) {
  const world_info w = given ? given->world : detect_world();
  if (w.size > 1) {
    throw invalid_argument_error(
        "backend local: its ranks are threads of one process, but " +
        std::string(to_string(w.launcher)) + " started this process as rank " +
        std::to_string(w.rank) + " of " + std::to_string(w.size) +
        "; name a backend that connects processes (DISTCOMM_BACKEND=gloo, ucx or mpi), or run "
        "the ranks as threads with distcomm::local_world");
  }
  return local_world(1).backend(0);
}

#if DISTCOMM_BUILT_MPI
// MPI_COMM_WORLD is the world: no store, so no master address is needed (multi-node mpirun).
// The backend refuses processes no MPI launcher started, saying how to start them.
// A given job must be MPI_COMM_WORLD itself: MPI cannot adopt ranks met through another store.
inline mpi_backend make_mpi(const config&, const job* given) {
  mpi_backend b;
  if (given && (given->world.size != b.size() || given->world.rank != b.rank())) {
    throw invalid_argument_error(
        "backend mpi: its world is MPI_COMM_WORLD (rank " + std::to_string(b.rank()) + " of " +
        std::to_string(b.size()) + "), not the group of " + std::to_string(given->world.size) +
        " ranks this rank is " + std::to_string(given->world.rank) +
        " of; name a backend that connects through a store (gloo, ucx) for this group");
  }
  return b;
}
#endif
#if DISTCOMM_BUILT_GLOO
inline gloo_backend make_gloo(const config& cfg, const job* given) {
  gloo_options o;
  o.timeout = cfg.timeout;
  check_interface(o);  // a wrong DISTCOMM_IFACE: refused on every rank before they meet
  return gloo_backend(given ? *given : shared_bootstrap(cfg), o);
}
#endif
#if DISTCOMM_BUILT_UCX
inline ucx_backend make_ucx(const config& cfg, const job* given) {
  // A DISTCOMM_IFACE this host does not have: refused on every rank before they meet.
  if (const char* iface = std::getenv("DISTCOMM_IFACE"); iface != nullptr && *iface != '\0') {
    (void)interface_for(iface);
  }
  return ucx_backend(given ? *given : shared_bootstrap(cfg), cfg.timeout);
}
#endif
#if DISTCOMM_BUILT_SHM
inline shm_backend make_shm(const config& cfg, const job* given) {
  shm_options o;
  o.timeout = cfg.timeout;
  return shm_backend(given ? *given : shared_bootstrap(cfg), o);
}
#endif
#if DISTCOMM_BUILT_NCCL
inline nccl_backend make_nccl(const config& cfg, const job* given) {
  return nccl_backend(given ? *given : shared_bootstrap(cfg), -1,
                      cfg.timeout);  // device: local rank modulo devices
}
#endif

// The list, in the order of --help texts and of the README.
inline const auto backend_table = std::make_tuple(
    backend_entry<local_backend>{
        {"local", "ranks are threads of one process; shared-memory collectives"}, &make_local}
#if DISTCOMM_BUILT_MPI
    ,
    backend_entry<mpi_backend>{{"mpi", "MPI_COMM_WORLD of mpirun/mpiexec/srun (Open MPI, MPICH)"},
                               &make_mpi}
#endif
#if DISTCOMM_BUILT_GLOO
    ,
    backend_entry<gloo_backend>{{"gloo", "gloo's TCP transport, meeting through the job's store"},
                                &make_gloo}
#endif
#if DISTCOMM_BUILT_UCX
    ,
    backend_entry<ucx_backend>{
        {"ucx", "UCX tag matching (TCP, RDMA), meeting through the job's store"}, &make_ucx}
#endif
#if DISTCOMM_BUILT_SHM
    ,
    backend_entry<shm_backend>{
        {"shm", "shared memory between the processes of one host, meeting through the job's store"},
        &make_shm}
#endif
#if DISTCOMM_BUILT_NCCL
    ,
    backend_entry<nccl_backend>{{"nccl", "NCCL on CUDA device memory, one GPU per rank"},
                                &make_nccl}
#endif
);

// What visit_backend() hands its function: make() returns a new backend of type B.
template <class B>
struct backend_maker {
  B (*fn)(const config&, const job*);
  const config* cfg;
  const job* given;
  B operator()() const { return fn(*cfg, given); }
};

template <class F>
void for_each_backend_entry(F&& f) {
  for_each_entry(backend_table, std::forward<F>(f));
}

}  // namespace detail

// Every backend this DistComm was built with, in the registry's order.
inline const std::vector<backend_info>& built_backends() {
  static const std::vector<backend_info> all =
      detail::infos_of<backend_info>(detail::backend_table);
  return all;
}

inline bool is_built_backend(const std::string& name) {
  for (const backend_info& b : built_backends()) {
    if (name == b.name) return true;
  }
  return false;
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

// The backend distcomm::init() takes when none is named, for a job as detect_world() sees it.
// Measured with 2 processes on one host (docs/PERFORMANCE.md, "Allreduce, 2 processes"):
//  * a job of one: local (no transport at all);
//  * ranks started by mpirun, mpiexec or srun: mpi. Open MPI's shared memory and TCP beat the
//    others at every size: 8 B in 0.59 us against ucx 10.4 and gloo 85; 32 MiB at 4.55 GB/s
//    against gloo's 1.93 and ucx's 1.44; a ResNet-50 step (fused) 27.0 ms against gloo's 78.8;
//  * every rank on this host: shm. Its collectives in shared memory beat the others at every size
//    (docs/PERFORMANCE.md, "Shared memory"): 32 MiB at 2.92 GB/s busbw against gloo's 1.0 and the
//    mpi backend's 2.2, 8 B in 2.5 us against gloo's 85 and ucx's 10;
//  * otherwise gloo, then ucx: from 8 MiB up, the sizes a fused gradient step sends, gloo's ring
//    moves 1.82-1.94 GB/s and ucx's 1.36-1.60. ucx wins below 2 MiB (0.74 against 0.23 GB/s at
//    128 KiB) and in latency (10 us against gloo's 85-164 at 8 B): name it for latency-bound jobs.
inline std::string default_backend(const world_info& w) {
  if (w.size <= 1) return "local";
  const bool mpi = started_by_mpi(w.launcher);
  for (const char* name : {mpi ? "mpi" : "", !mpi && w.single_node() ? "shm" : "", "gloo", "ucx"}) {
    if (*name != '\0' && is_built_backend(name)) return name;
  }
  throw invalid_argument_error(
      "no backend that connects processes was built into this DistComm (built: " +
      join_names(built_backends()) + ") and " + to_string(w.launcher) + " started " +
      std::to_string(w.size) +
      " ranks; rebuild with gloo, ucx or MPI installed, or load a plugin with DISTCOMM_BACKEND");
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
  detail::for_each_backend_entry([&](const auto& e) {
    if (found || name != e.info.name) return;
    found = true;
    out.call(f,
             detail::backend_maker<typename std::decay_t<decltype(e)>::type>{e.make, &cfg, given});
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
