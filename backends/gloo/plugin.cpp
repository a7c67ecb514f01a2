// The gloo backend as a plugin (libdistcomm_backend_gloo.so), connected through the job's store
// that the program offers.
#include "distcomm/backends/gloo.hpp"
#include "distcomm/plugin/export.hpp"

DISTCOMM_EXPORT_BACKEND_V1(distcomm::gloo_backend, [](const distcomm::plugin::host& h) {
  distcomm::gloo_options o;
  o.timeout = h.timeout;
  return distcomm::gloo_backend(h.as_job(), o);
})
