// make_communicator() over plugin_backend: every strategy's communicator<plugin_backend, S> (the
// host fusion buffer), compiled here once; the overload is declared in
// distcomm/plugin/plugin_backend.hpp.
#include "distcomm/plugin/plugin_backend.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(plugin_backend backend, const std::string& strategy,
                                   config cfg) {
  return make_communicator<plugin_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
