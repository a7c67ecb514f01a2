// distcomm::hierarchical: allreduce across hosts in three steps, the way Horovod's hierarchical
// allreduce does: reduce-scatter inside the node over a fast intra-node backend (shm), allreduce
// of each slice across nodes over the network backend (gloo, ucx, mpi), every local rank on its
// own slice so that every rank's core and link work at once, then allgather inside the node.
// The bytes that cross the network per node are the buffer's once, where a flat ring over all
// ranks sends each rank's 2(p-1)/p share over links the node's ranks share.
//   distcomm::init_options intra, inter;
//   intra.backend = "shm";
//   inter.backend = "gloo";
//   auto h = distcomm::hierarchical::connect(intra, inter);  // collective over the job
//   h.allreduce(distcomm::view(gradients));
// Any pair of backends works (each init_options as for distcomm::init(); empty names: the
// default for a job of one node, and for a job of one rank per node); an mpi group is split from
// MPI_COMM_WORLD. The job needs a store (shm meets through it, and so do the host names): under
// mpirun, MASTER_ADDR/MASTER_PORT. Every node must run the same number of ranks. Needs
// DistComm::DistComm.
#pragma once

#include <cstddef>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/init.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace distcomm {

class hierarchical {
 public:
  // Over the launched job (shared_bootstrap()), or `given`: learns through the job's store which
  // ranks share a host (by host name), then connects this node's ranks over `intra` and the ranks
  // with this rank's local rank on every node over `inter`. Collective over the job;
  // invalid_argument_error, on every rank, when the nodes run different numbers of ranks.
  static hierarchical connect(const init_options& intra = {}, const init_options& inter = {},
                              const job* given = nullptr);
  hierarchical(any_communicator intra, any_communicator inter);

  // data = the reduction of every rank's data, in place. A count that the node's ranks do not
  // divide evenly has its last count % ranks-per-node elements reduced by the node's and the
  // network's allreduce directly.
  void allreduce(tensor_view data, reduce_op op = reduce_op::sum);

  // Rank in the job: node-major (the node's index, then the local rank), which is the job's rank
  // when the launcher numbers ranks node by node, as torchrun and mpirun's default do.
  int rank() const { return inter_.rank() * intra_.size() + intra_.rank(); }
  int size() const { return inter_.size() * intra_.size(); }
  any_communicator& intra() { return intra_; }
  any_communicator& inter() { return inter_; }

 private:
  any_communicator intra_;
  any_communicator inter_;
  std::vector<unsigned char> slice_;  // this rank's slice between the steps
};

}  // namespace distcomm
