// The MPI backend as a plugin (libdistcomm_backend_mpi.so): a duplicate of MPI_COMM_WORLD, MPI
// initialised by the plugin unless the program did. MPI finds the other ranks itself, so the
// job's store is never touched. Run under mpirun like any MPI program.
// DISTCOMM_PLUGIN_OPTIONS=finalize=always: MPI_Finalize at exit even after a failure, which the
// backend otherwise skips (a failed peer would hold MPI_Finalize forever), for programs that
// recover from failures and know every rank is still there (the backend suite's timeouts).
#include <cstdlib>
#include <string>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/plugin/export.hpp"

namespace {

distcomm::mpi_backend make(const distcomm::plugin::host& h) {
  if (h.options == "finalize=always") {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      std::atexit([] {
        int finalized = 0;
        if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
      });
    }
  } else if (!h.options.empty()) {
    throw distcomm::invalid_argument_error("mpi: DISTCOMM_PLUGIN_OPTIONS='" + h.options +
                                           "' is not an option of this plugin (finalize=always)");
  }
  return distcomm::mpi_backend();
}

}  // namespace

DISTCOMM_EXPORT_BACKEND_V1(distcomm::mpi_backend, &make)
