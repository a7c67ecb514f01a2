// The shm backend as a plugin (libdistcomm_backend_shm.so), meeting through the job's store that
// the program offers.
#include "distcomm/backends/shm.hpp"
#include "distcomm/plugin/export.hpp"

DISTCOMM_EXPORT_BACKEND_V1(distcomm::shm_backend, [](const distcomm::plugin::host& h) {
  distcomm::shm_options o;
  o.timeout = h.timeout;
  return distcomm::shm_backend(h.as_job(), o);
})
