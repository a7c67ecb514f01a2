// make_communicator() over plugin_backend: every strategy's communicator<plugin_backend, S> (the
// host fusion buffer), compiled here once; the overload is declared in
// distcomm/plugin/plugin_backend.hpp.
#include "distcomm/plugin/plugin_backend.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"
#include "distcomm/hierarchical.hpp"

namespace distcomm {

any_communicator make_communicator(plugin_backend backend, const std::string& strategy,
                                   config cfg) {
  return make_communicator<plugin_backend>(std::move(backend), strategy, std::move(cfg));
}

any_communicator make_hierarchical_communicator(plugin_backend backend,
                                                std::shared_ptr<levels> over, std::size_t threshold,
                                                config cfg) {
  using S = strategy::hierarchical<>;
  return any_communicator(
      std::in_place_type<communicator<plugin_backend, S>>, std::move(backend), std::move(cfg),
      std::function<S(const config&)>([&](const config& c) { return S(c, over, threshold); }));
}

}  // namespace distcomm
