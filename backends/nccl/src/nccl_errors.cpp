#include "errors.hpp"

#include "distcomm/backends/nccl.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail {

std::string describe_nccl(ncclResult_t code, const char* routine, ncclComm_t comm) {
  std::string what = std::string(routine) + ": " + ncclGetErrorString(code);
  // ncclGetLastError(nullptr) reports the last error of any communicator of this process.
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') what += std::string(" (") + last + ")";
  return what;
}

void check_nccl(ncclResult_t code, const char* routine, ncclComm_t comm) {
  if (code == ncclSuccess || code == ncclInProgress) return;
  switch (code) {
    case ncclRemoteError:
      throw peer_lost_error("nccl: " + describe_nccl(code, routine, comm) +
                            "; a peer failed or left the communicator");
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw invalid_argument_error("nccl: " + describe_nccl(code, routine, comm));
    default:
      throw backend_error(nccl_backend::name, routine, static_cast<long>(code),
                          describe_nccl(code, routine, comm));
  }
}

}  // namespace distcomm::detail
