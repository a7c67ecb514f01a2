// make_communicator() over gloo_backend: every strategy's communicator<gloo_backend, S> (the host
// fusion buffer), compiled here once; the overload is declared in distcomm/backends/gloo.hpp.
#include "distcomm/backends/gloo.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(gloo_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<gloo_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
