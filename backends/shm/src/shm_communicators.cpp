// make_communicator() over shm_backend: every strategy's communicator<shm_backend, S> (the host
// fusion buffer), compiled here once; the overload is declared in distcomm/backends/shm.hpp.
#include "distcomm/backends/shm.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(shm_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<shm_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
