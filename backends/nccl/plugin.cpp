// The NCCL backend as a plugin (libdistcomm_backend_nccl.so) on the device of the rank's local
// rank. Its table says DISTCOMM_V1_DEVICE_MEMORY: a program passing CUDA device pointers may use
// it; DistComm's plugin_backend, whose strategies reduce host memory, refuses it by name.
#include "distcomm/backends/nccl.hpp"
#include "distcomm/plugin/export.hpp"

DISTCOMM_EXPORT_BACKEND_V1(distcomm::nccl_backend, [](const distcomm::plugin::host& h) {
  return distcomm::nccl_backend(h.as_job(), -1, h.timeout);
})
