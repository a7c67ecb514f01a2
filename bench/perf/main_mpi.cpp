// distcomm-bench-mpi: the sweep on the MPI backend (a duplicate of MPI_COMM_WORLD).
//   mpirun -np 2 distcomm-bench-mpi -b 8 -e 64M -f 2 --peer mpi
#include <memory>
#include <optional>
#include <string>

#include "distcomm/backends/mpi.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "driver.hpp"

int main(int argc, char** argv) {
  namespace db = distcomm::bench;
  namespace dc = distcomm;
  const char* program = "distcomm-bench-mpi";
  db::options o;
  if (const int rc = db::parse_options(argc, argv, {program, false}, o); rc >= 0) return rc;
  return db::guarded_main(program, [&] {
    // Without mpirun, MPI_Init gives each process a world of its own: refuse before that.
    const dc::world_info w = dc::detect_world();
    if (w.size > 1 && !dc::started_by_mpi(w.launcher)) {
      throw dc::invalid_argument_error(
          std::string("the MPI backend's ranks must be started by mpirun (or mpiexec, srun), "
                      "not by ") +
          dc::to_string(w.launcher) + "; e.g. mpirun -np 2 " + program);
    }
    const dc::config cfg = dc::config::from_env();
    db::process_env env = db::process_env_of(program, w, cfg);
    db::precheck<dc::mpi_backend>(o, env.peer);
    dc::mpi_backend b;
    if (b.size() != w.size) {
      throw dc::invalid_argument_error("MPI_COMM_WORLD has " + std::to_string(b.size()) +
                                       " ranks but the launcher (" + dc::to_string(w.launcher) +
                                       ") says " + std::to_string(w.size));
    }
    std::optional<dc::job> j;  // bootstrapped only for --peer gloo, which needs a store
    env.peer.kv = [&] {
      j = dc::bootstrap(cfg);
      return j->kv;
    };
    return db::run(std::move(b), o, env);
  });
}
