// make_communicator() over mpi_backend: every strategy's communicator<mpi_backend, S> (the host
// fusion buffer), compiled here once; the overload is declared in distcomm/backends/mpi.hpp.
#include "distcomm/backends/mpi.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"

namespace distcomm {

any_communicator make_communicator(mpi_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<mpi_backend>(std::move(backend), strategy, std::move(cfg));
}

}  // namespace distcomm
