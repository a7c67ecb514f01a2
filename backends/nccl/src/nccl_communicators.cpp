// make_communicator() over nccl_backend: every strategy's communicator<nccl_backend, S> (grouped
// calls packed on the device by cuda::fusion), compiled here once; the overload is declared in
// distcomm/backends/nccl.hpp.
#include "distcomm/backends/nccl.hpp"

#include <string>
#include <utility>

#include "distcomm/any_communicator.hpp"
#include "distcomm/cuda/fusion.hpp"

namespace distcomm {

any_communicator make_communicator(nccl_backend backend, const std::string& strategy, config cfg) {
  return make_communicator<nccl_backend, cuda::fusion>(std::move(backend), strategy,
                                                       std::move(cfg));
}

}  // namespace distcomm
