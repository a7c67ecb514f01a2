// The UCX backend as a plugin (libdistcomm_backend_ucx.so): worker addresses exchanged through
// the job's store that the program offers.
#include "distcomm/backends/ucx.hpp"
#include "distcomm/plugin/export.hpp"

DISTCOMM_EXPORT_BACKEND_V1(distcomm::ucx_backend, [](const distcomm::plugin::host& h) {
  return distcomm::ucx_backend(h.as_job(), h.timeout);
})
