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
//
// The whole job's communicator built on it (hierarchical_communicator::connect) is the flat
// communicator of the network backend with strategy::hierarchical (strategy/hierarchical.hpp): an
// allreduce of at least the threshold goes the hierarchical way, everything else is flat's, all
// through the one communicator's validation, call check and Tensor Fusion. distcomm::init() makes
// one when the job spans several hosts with several ranks on each (DISTCOMM_HIERARCHICAL, README).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/init.hpp"
#include "distcomm/plugin/plugin_backend.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "distcomm/strategy/hierarchical.hpp"

namespace distcomm {

class hierarchical final : public levels {
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
  // network's allreduce directly. Each level's call agrees across its ranks and has its own
  // deadline, as any call; under the whole job's communicator (the levels' allreduce below) they
  // are covered by its agreement and end by its deadline.
  void allreduce(tensor_view data, reduce_op op = reduce_op::sum);

  // Rank in the job: node-major (the node's index, then the local rank), which is the job's rank
  // when the launcher numbers ranks node by node, as torchrun and mpirun's default do.
  int rank() const { return inter_.rank() * intra_.size() + intra_.rank(); }
  int size() const override { return inter_.size() * intra_.size(); }
  any_communicator& intra() { return intra_; }
  any_communicator& inter() { return inter_; }
  // "shm+gloo": inside a host, then across.
  const std::string& name() const override { return name_; }

  // levels (strategy/hierarchical.hpp): the allreduce above; the level across hosts keeps its
  // own table, and its fusion and segment settings until the flat ones move away from where they
  // started, then follows them there (the level inside a host keeps its own); the threshold every
  // rank asked for, agreed through both levels (mismatch_error naming the range otherwise).
  void allreduce(void* data, std::size_t count, dtype t, reduce_op op, deadline until) override;
  void retune(const config& was, const config& now) override;
  std::size_t agree(std::size_t threshold) override;

 private:
  any_communicator intra_;
  any_communicator inter_;
  std::string name_;
  std::vector<unsigned char> slice_;  // this rank's slice between the steps

  // Both allreduces: `within`, the outer call's deadline (its calls then agreed), or none.
  void run(tensor_view data, reduce_op op, std::optional<deadline> within);
  // Where the flat settings and the level across hosts started, taken at the first retune().
  std::optional<std::pair<config, tuning>> started_;
};

// The size from which init() makes an allreduce hierarchical on a job of world `w`, or nothing
// when it does not: DISTCOMM_HIERARCHICAL is `off`; or a backend or strategy (other than "auto") is
// named, or the run is deterministic (the fold's order would differ from the flat one's); or the
// job is on one host, or has one rank per host, or hosts with different numbers of ranks, or was
// started by mpirun (whose job has no store for shm), or shm is not built. DISTCOMM_HIERARCHICAL
// (`auto`, the default: hierarchical_threshold_default) or a size in bytes sets the size.
std::optional<std::size_t> hierarchical_threshold(const world_info& w, const config& cfg,
                                                  const init_options& options);
// 256 KiB: below it the hierarchical allreduce's three collectives against one are a wash, from
// it a win (docs/PERFORMANCE.md, "The hierarchical threshold").
inline constexpr std::size_t hierarchical_threshold_default = std::size_t{256} << 10;

// The whole job's communicator of a hierarchical job: the flat communicator of `inter`'s backend
// over the whole job, with strategy::hierarchical over hierarchical::connect(intra, inter) from
// `threshold` bytes (backend_name() "shm+gloo", strategy_name() "hierarchical"). Its
// sub-communicators and the survivors of shrink() are flat.
struct hierarchical_communicator {
  static any_communicator connect(const init_options& intra, const init_options& inter,
                                  const job* given, std::size_t threshold);
};

// A hierarchical job's communicator over a loaded plugin (init/src/plugin_communicators.cpp; the
// built host backends' are declared in distcomm/backends/built.hpp).
any_communicator make_hierarchical_communicator(plugin_backend backend,
                                                std::shared_ptr<levels> over, std::size_t threshold,
                                                config cfg);

// The levels a communicator of hierarchical_communicator::connect() runs its large allreduces
// over, or nullptr for any other communicator.
std::shared_ptr<hierarchical> levels_of(any_communicator& comm);

}  // namespace distcomm
