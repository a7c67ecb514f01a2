// hierarchical_communicator (hierarchical.hpp): the whole job's communicator of a hierarchical
// job, the flat communicator of the network backend with strategy::hierarchical over the levels;
// when init() makes one (hierarchical_threshold); and the levels of one (levels_of).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/hierarchical.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/store_plugin.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm {

std::optional<std::size_t> hierarchical_threshold(const world_info& w, const config& cfg,
                                                  const init_options& options) {
  // DISTCOMM_HIERARCHICAL, or what init_options::settings says instead.
  const std::string setting = cfg.hierarchical.empty() ? "auto" : cfg.hierarchical;
  if (setting == "off") return std::nullopt;
  // A size is parsed (and refused with a message) whatever the job: a typo shows on one host too.
  const std::size_t from = setting == "auto" ? hierarchical_threshold_default
                                             : parse_bytes(setting, "DISTCOMM_HIERARCHICAL");
  // A strategy asked for by name (not "auto", the default said aloud) is the flat one's.
  const auto asked = [](const std::string& strategy) {
    return !strategy.empty() && strategy != "auto";
  };
  if (!options.backend.empty() || !cfg.backend.empty() || asked(options.strategy) ||
      asked(cfg.strategy) || cfg.deterministic) {
    return std::nullopt;
  }
  if (w.size <= 1 || w.single_node() || started_by_mpi(w.launcher) || w.local_size <= 1 ||
      intra_host_backend().empty()) {
    return std::nullopt;
  }
  if (w.size % w.local_size != 0) {
    // A job that lost some of a host's ranks and took back fewer, say.
    log(log_level::info, "init: " + std::to_string(w.size) + " ranks do not fill hosts of " +
                             std::to_string(w.local_size) +
                             ": the hosts hold different numbers of ranks, so the communicator is "
                             "flat, not hierarchical");
    return std::nullopt;
  }
  return from;
}

namespace {

// B can be the level across hosts (its traits say so; a plugin may be).
template <class B>
constexpr bool across_hosts_level() {
  if constexpr (detail::has_traits<B>::value) {
    return B::traits.across_hosts_level();
  } else {
    return true;
  }
}

}  // namespace

any_communicator hierarchical_communicator::connect(const init_options& intra,
                                                    const init_options& inter, const job* given,
                                                    std::size_t threshold) {
  const config cfg = inter.settings ? *inter.settings : config::from_env();
  plugin::enable_store_plugins();
  const job j = given ? *given : shared_bootstrap(cfg);
  auto over = std::make_shared<hierarchical>(hierarchical::connect(intra, inter, &j));
  const std::string backend = inter.backend.empty() ? default_backend(j.world) : inter.backend;
  return visit_backend(
      backend, cfg,
      [&](auto make) -> any_communicator {
        using B = decltype(make());
        if constexpr (!across_hosts_level<B>()) {
          throw invalid_argument_error("hierarchical: backend '" + backend +
                                       "' cannot be the level across hosts (it needs ranks that "
                                       "are processes on several hosts, moving host memory)");
        } else {
          // Compiled in B's own library (distcomm/backends/built.hpp declares it).
          return make_hierarchical_communicator(make(), over, threshold, cfg);
        }
      },
      &j);
}

std::shared_ptr<hierarchical> levels_of(any_communicator& comm) {
  using S = strategy::hierarchical<>;
  std::shared_ptr<levels> found;
  detail::for_each_built_backend([&](auto tag) {
    using B = typename decltype(tag)::type;
    if constexpr (across_hosts_level<B>()) {
      if (auto* c = comm.target<communicator<B, S>>()) found = c->strategy().over();
    }
  });
  if (auto* c = comm.target<communicator<plugin_backend, S>>()) found = c->strategy().over();
  return std::dynamic_pointer_cast<hierarchical>(found);
}

}  // namespace distcomm
