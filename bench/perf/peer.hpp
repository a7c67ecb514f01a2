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

// A peer by name: `check` throws invalid_argument_error when it cannot run in this job (not built,
// or mpi in a multi-rank job that mpirun did not start), cheaply, before anything connects; `make`
// connects it, collective over the world. mpi and gloo (host memory) are known from the start; a
// program adds its own with add_peer() before parsing (distcomm-bench-nccl: nccl, on device
// buffers).
struct peer_kind {
  std::string name;
  std::function<void(const peer_world&)> check;
  std::function<std::unique_ptr<peer>(const peer_world&)> make;
};
void add_peer(peer_kind k);

// Throws invalid_argument_error when peer `name` is unknown or cannot run in this job.
void check_peer(const std::string& name, const peer_world& w);

// The peer `name`, connected; collective over the world. Throws as check_peer() does.
std::unique_ptr<peer> make_peer(const std::string& name, const peer_world& w);

}  // namespace distcomm::bench
