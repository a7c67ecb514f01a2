#include "distcomm/cuda/check.hpp"

#include <string>

#include "distcomm/core/error.hpp"

namespace distcomm::detail {

void check_cuda(cudaError_t code, const char* routine) {
  if (code == cudaSuccess) return;
  throw backend_error("cuda", routine, static_cast<long>(code),
                      std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code));
}

}  // namespace distcomm::detail
