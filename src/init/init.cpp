// distcomm::init(): the registries' names turned into a typed communicator, once, here; every
// backend x strategy pair the build allows is instantiated in this file and nowhere else.
#include "distcomm/init.hpp"

#include <string>
#include <type_traits>
#include <utility>

#include "distcomm/log.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/world.hpp"
#if DISTCOMM_BUILT_NCCL
#include "distcomm/cuda/fusion.hpp"
#endif

namespace distcomm {

namespace {

config settings_of(const init_options& o) { return o.settings ? *o.settings : config::from_env(); }

std::string backend_of(const init_options& o, const config& cfg) {
  if (!o.backend.empty()) return o.backend;
  if (!cfg.backend.empty()) return cfg.backend;
  return default_backend(detect_world());
}

std::string strategy_of(const init_options& o, const config& cfg) {
  if (!o.strategy.empty()) return find_strategy(o.strategy).name;
  return cfg.strategy.empty() ? std::string("auto") : cfg.strategy;
}

// Grouped allreduces pack host tensors with fusion::buffer, device tensors with cuda::fusion.
template <class B>
struct fusion_for {
  using type = fusion::buffer;
};
#if DISTCOMM_BUILT_NCCL
template <>
struct fusion_for<nccl_backend> {
  using type = cuda::fusion;
};
#endif

}  // namespace

std::string resolved_backend(const init_options& options) {
  return backend_of(options, settings_of(options));
}

std::string resolved_strategy(const init_options& options) {
  return strategy_of(options, settings_of(options));
}

any_communicator init(const init_options& options) {
  const config cfg = settings_of(options);
  const std::string backend = backend_of(options, cfg);
  const std::string strategy = strategy_of(options, cfg);
  set_log_level(cfg.log);  // before connecting: the backends log while they start
  return visit_backend(backend, cfg, [&](auto make) {
    using B = decltype(make());
    // The strategy is checked against the backend before make() connects anything.
    return visit_strategy<B>(strategy, [&](auto tag) {
      using S = typename decltype(tag)::type;
      any_communicator comm(std::in_place_type<communicator<B, S, typename fusion_for<B>::type>>,
                            make(), cfg);
      if (log_enabled(log_level::info)) {
        log(log_level::info, "init: rank " + std::to_string(comm.rank()) + "/" +
                                 std::to_string(comm.size()) + ", backend " + backend +
                                 ", strategy " + strategy);
      }
      return comm;
    });
  });
}

}  // namespace distcomm
