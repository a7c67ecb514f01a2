// Turning NCCL status codes into DistComm's exceptions, in one place for the backend; CUDA's are
// turned by the CUDA layer's check_cuda (distcomm/cuda/check.hpp).
#pragma once

#include <nccl.h>

#include <string>

#include "distcomm/cuda/check.hpp"

namespace distcomm::detail {

// Throws for a failed NCCL call: ncclRemoteError (a peer failed or left) as peer_lost_error,
// ncclInvalidArgument / ncclInvalidUsage as invalid_argument_error, anything else as
// backend_error; the message carries ncclGetErrorString and, when comm is given, ncclGetLastError.
// ncclInProgress is not an error (a non-blocking communicator accepted the call).
void check_nccl(ncclResult_t code, const char* routine, ncclComm_t comm = nullptr);

// The same message without throwing, for abort paths and destructors.
std::string describe_nccl(ncclResult_t code, const char* routine, ncclComm_t comm);

}  // namespace distcomm::detail
