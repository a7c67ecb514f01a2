// make_communicator() over ucx_backend: every strategy's communicator<ucx_backend, S> (the host
// fusion buffer), compiled here once; the overload is declared in distcomm/backends/ucx.hpp.
#include "distcomm/backends/ucx.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(ucx_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<ucx_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
