// --peer: the raw library's own allreduce (and MPI_Alltoall(v)), run interleaved with DistComm's at
// every size so both see the same machine state. mpi: MPI_Allreduce on MPI_COMM_WORLD (ranks
// started by mpirun); gloo: gloo::allreduce (the options API; the older algorithm classes stall on
// small messages here, see the peers harness) on a gloo context connected through the job's
// DistComm store.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm::bench {

class peer {
 public:
  virtual ~peer() = default;
  // In place, blocking. avg is the library's sum followed by one division, as a user would do.
  virtual void allreduce(void* data, std::size_t count, dtype t, reduce_op op) = 0;
  // Out of place, `block` elements per rank; options.cpp admits only peers that have it.
  virtual void alltoall(const void* in, void* out, std::size_t block, dtype t) {
    (void)in, (void)out, (void)block, (void)t;
  }
  // Out of place, per-rank counts and displacements in elements (MPI_Alltoallv's arguments).
  virtual void alltoallv(const void* in, const int* send_counts, const int* send_displs, void* out,
                         const int* recv_counts, const int* recv_displs, dtype t) {
    (void)in, (void)send_counts, (void)send_displs, (void)out, (void)recv_counts, (void)recv_displs,
        (void)t;
  }
  // What runs, for the header: "MPI_Allreduce on MPI_COMM_WORLD".
  virtual std::string description() const = 0;
};

// What a peer needs to know about the job.
struct peer_world {
  int rank = 0;
  int size = 1;
  bool single_node = true;
  launcher_kind launcher = launcher_kind::none;
  std::chrono::duration<double> timeout{300.0};
  // The job's store (gloo connects through it); called once, by the gloo peer only.
  std::function<std::shared_ptr<store>()> kv;
};

// Throws invalid_argument_error when peer `name` cannot run in this job (unknown, not built, or
// mpi in a multi-rank job that mpirun did not start). Cheap: call it before connecting anything.
void check_peer(const std::string& name, const peer_world& w);

// name: "mpi" or "gloo". Collective over the world. Throws invalid_argument_error when that peer
// was not built or cannot run in this job (e.g. mpi without mpirun).
std::unique_ptr<peer> make_peer(const std::string& name, const peer_world& w);

}  // namespace distcomm::bench
