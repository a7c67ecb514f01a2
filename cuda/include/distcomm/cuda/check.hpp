// Turning CUDA status codes into DistComm's exceptions, in one place for the CUDA layer (kernels,
// cuda::fusion, cuda::host_staged) and the backends built on it (nccl). Not part of the public
// API.
#pragma once

#include <cuda_runtime_api.h>

namespace distcomm::detail {

// Throws backend_error("cuda", routine, code, cudaGetErrorString(code)) unless code is success.
void check_cuda(cudaError_t code, const char* routine);

}  // namespace distcomm::detail
