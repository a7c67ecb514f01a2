// make_communicator() over local_backend: every strategy's communicator<local_backend, S> (the host
// fusion buffer), compiled here once; the overload is declared in distcomm/backends/local.hpp.
#include "distcomm/backends/local.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(local_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<local_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
