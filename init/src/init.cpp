// distcomm::init(): the registries' names turned into a communicator, through the
// make_communicator() overload of each backend's library (where its communicators are compiled).
#include "distcomm/init.hpp"

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "distcomm/hierarchical.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/store_plugin.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "launch_options.hpp"

namespace distcomm {

namespace {

config settings_of(const init_options& o) { return o.settings ? *o.settings : config::from_env(); }

// The world the default choice depends on, read once and only when no backend is named.
world_info world_for_default(const init_options& o, const config& cfg, const job* given) {
  if (!o.backend.empty() || !cfg.backend.empty()) return world_info{};
  return given ? given->world : detect_world();
}

std::string backend_of(const init_options& o, const config& cfg, const world_info& w) {
  if (!o.backend.empty()) return o.backend;
  if (!cfg.backend.empty()) return cfg.backend;
  return default_backend(w);
}

std::string strategy_of(const init_options& o, const config& cfg) {
  if (!o.strategy.empty()) return find_strategy(o.strategy).name;
  return cfg.strategy.empty() ? std::string("auto") : cfg.strategy;
}

}  // namespace

std::string resolved_backend(const init_options& options) {
  const config cfg = settings_of(options);
  const world_info w = world_for_default(options, cfg, nullptr);
  if (hierarchical_threshold(w, cfg, options)) {
    return intra_host_backend() + "+" + default_backend(w);
  }
  return backend_of(options, cfg, w);
}

std::string resolved_strategy(const init_options& options) {
  return strategy_of(options, settings_of(options));
}

namespace {

// init() of the launcher's job (given null) or of `given`.
any_communicator connect(const init_options& options, const job* given) {
  const config cfg = settings_of(options);
  plugin::enable_store_plugins();  // DISTCOMM_STORE=c10d://..., torchrun's agent store
  // A job across hosts with several ranks on each: shm inside each host, the network backend
  // across, when nothing else is asked for (hierarchical.hpp says when and from which size).
  world_info w = world_for_default(options, cfg, given);
  job launched;
  if (given == nullptr && hierarchical_threshold(w, cfg, options)) {
    // Decided on the job this process is in, which for a replacement admitted to a running job
    // is the grown one (its hosts may hold different numbers of ranks), not the launcher's.
    launched = shared_bootstrap(cfg);
    given = &launched;
    w = launched.world;
  }
  if (const std::optional<std::size_t> from = hierarchical_threshold(w, cfg, options)) {
    init_options intra = options, inter = options;
    intra.settings = inter.settings = cfg;
    intra.backend = intra_host_backend();
    inter.backend = default_backend(w);
    set_log_level(cfg.log);
    any_communicator comm = hierarchical_communicator::connect(intra, inter, given, *from);
    if (log_enabled(log_level::info)) {
      log(log_level::info, "init: rank " + std::to_string(comm.rank()) + "/" +
                               std::to_string(comm.size()) + ", backend " + comm.backend_name() +
                               ", allreduce hierarchical from " + std::to_string(*from) + " bytes");
    }
    return comm;
  }
  const std::string backend = backend_of(options, cfg, w);
  const std::string strategy = strategy_of(options, cfg);
  set_log_level(cfg.log);  // before connecting: the backends log while they start
  return visit_backend(
      backend, cfg,
      [&](auto make) {
        using B = decltype(make());
        // The strategy is checked against the backend before make() connects anything.
        visit_strategy<B>(strategy, [](auto) { return true; });
        // The overload of B's own library: each communicator is compiled there, once.
        any_communicator comm = make_communicator(make(), strategy, cfg);
        if (log_enabled(log_level::info)) {
          log(log_level::info, "init: rank " + std::to_string(comm.rank()) + "/" +
                                   std::to_string(comm.size()) + ", backend " + backend +
                                   ", strategy " + strategy);
        }
        return comm;
      },
      given);
}

}  // namespace

namespace detail {

namespace {
std::mutex launch_mu;
std::optional<init_options> launched;
}  // namespace

void remember_launch_options(const init_options& options) {
  const std::lock_guard<std::mutex> lock(launch_mu);
  launched = options;
}

std::optional<init_options> launch_options() {
  const std::lock_guard<std::mutex> lock(launch_mu);
  return launched;
}

}  // namespace detail

any_communicator init(const init_options& options) {
  detail::remember_launch_options(options);
  return connect(options, nullptr);
}

any_communicator init(const job& world, const init_options& options) {
  return connect(options, &world);
}

}  // namespace distcomm
