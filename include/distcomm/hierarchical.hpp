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
// hierarchical_communicator is the whole job's communicator built on it: an allreduce of at least
// `threshold` bytes goes the hierarchical way, everything else over a flat communicator of the
// whole job on the network backend. distcomm::init() returns one when the job spans several
// hosts with several ranks on each (DISTCOMM_HIERARCHICAL, README).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/async/progress.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/init.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"

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

// The size from which init() makes an allreduce hierarchical on a job of world `w`, or nothing
// when it does not: DISTCOMM_HIERARCHICAL is `off`; or a backend or strategy is named, or the
// run is deterministic (the fold's order would differ from the flat one's); or the job is on one
// host, or has one rank per host, or hosts with different numbers of ranks, or was started by
// mpirun (whose job has no store for shm), or shm is not built. DISTCOMM_HIERARCHICAL (`auto`, the
// default: hierarchical_threshold_default) or a size in bytes sets the size.
std::optional<std::size_t> hierarchical_threshold(const world_info& w, const config& cfg,
                                                  const init_options& options);
// 256 KiB. 2 namespace-hosts x 2 ranks, links shaped to 1 Gbit/s (tbf), shm inside and gloo
// across against gloo's flat allreduce, f32 sum, medians of 10, 2026-11-27 on the 2-core VM
// (docs/PERFORMANCE.md, "Hierarchical allreduce"): 256 KiB-32 MiB 1.09-2.31x, 256 B-16 KiB a
// wash (0.88-2.09x, one collective against three).
inline constexpr std::size_t hierarchical_threshold_default = std::size_t{256} << 10;

// A communicator of the whole job: an allreduce of at least `threshold` bytes (the grouped form:
// of all its tensors, when they share a dtype) is hierarchical (above); every other call goes to
// `flat`, a communicator of the whole job. Calls run in the order they were made, as on any
// communicator: each on this communicator's own progress thread (the non-blocking ones) or the
// caller's, calling the blocking form of the communicator underneath; sends and receives complete
// in the background as there. Sub-communicators (split, subset, split_by_node) are flat's.
class hierarchical_communicator {
 public:
  struct backend_type {};  // host memory (any_communicator::memory())

  // Over the launched job (shared_bootstrap()), or `given`: hierarchical::connect(intra, inter)
  // and `inter` over the whole job, in an any_communicator (target<hierarchical_communicator>()
  // gives this type back).
  static any_communicator connect(const init_options& intra, const init_options& inter,
                                  const job* given, std::size_t threshold);
  hierarchical_communicator(any_communicator flat, hierarchical h, std::size_t threshold);

  int rank() const { return flat_.rank(); }
  int size() const { return flat_.size(); }
  const char* backend_name() const { return name_.c_str(); }  // "shm+gloo": inside+across
  const char* strategy_name() const { return "hierarchical"; }
  const config& settings() const { return flat_.settings(); }
  std::uint64_t calls() const { return calls_; }
  std::size_t threshold() const { return threshold_; }
  any_communicator& flat() { return flat_; }
  hierarchical& levels() { return h_; }

  void allreduce(tensor_view in, tensor_view out, reduce_op op);
  void allreduce(span<const tensor_view> tensors, reduce_op op);
  work iallreduce(tensor_view in, tensor_view out, reduce_op op);
  work iallreduce(span<const tensor_view> tensors, reduce_op op);
  void reduce_scatter(tensor_view in, tensor_view out, reduce_op op);
  work ireduce_scatter(tensor_view in, tensor_view out, reduce_op op);
  void allgather(tensor_view in, tensor_view out);
  work iallgather(tensor_view in, tensor_view out);
  void broadcast(tensor_view data, int root);
  work ibroadcast(tensor_view data, int root);
  void barrier();
  work ibarrier();
  void reduce(tensor_view in, tensor_view out, reduce_op op, int root);
  work ireduce(tensor_view in, tensor_view out, reduce_op op, int root);
  void gather(tensor_view in, tensor_view out, int root);
  work igather(tensor_view in, tensor_view out, int root);
  void scatter(tensor_view in, tensor_view out, int root);
  work iscatter(tensor_view in, tensor_view out, int root);
  void alltoall(tensor_view in, tensor_view out);
  work ialltoall(tensor_view in, tensor_view out);
  void alltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                 span<const std::size_t> recv_counts, span<const std::size_t> send_displs,
                 span<const std::size_t> recv_displs);
  work ialltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                  span<const std::size_t> recv_counts, span<const std::size_t> send_displs,
                  span<const std::size_t> recv_displs);
  void allgatherv(tensor_view in, tensor_view out, span<const std::size_t> counts,
                  span<const std::size_t> displs);
  work iallgatherv(tensor_view in, tensor_view out, span<const std::size_t> counts,
                   span<const std::size_t> displs);
  void send(tensor_view data, int peer, int tag);
  void recv(tensor_view data, int peer, int tag);
  void sendrecv(tensor_view out, int dest, tensor_view in, int source, int tag);
  work isend(tensor_view data, int peer, int tag);
  work irecv(tensor_view data, int peer, int tag);
  work isendrecv(tensor_view out, int dest, tensor_view in, int source, int tag);
  std::optional<any_communicator> split(int color, int key);
  std::optional<any_communicator> subset(span<const int> ranks);
  any_communicator split_by_node();
  // The survivors of a lost rank: flat's (communicator::shrink), without the hierarchy (a lost
  // rank leaves the hosts with unequal ranks).
  any_communicator shrink();
  any_communicator shrink(std::chrono::duration<double> window);
  void synchronize() { progress_.drain(); }

  // communicator::retune: the flat communicator's settings, and the threshold
  // (t.hierarchical_threshold, unless 0). The level across hosts started from settings of its own
  // (over gloo, gloo's allreduce from 1 MiB: hierarchical.cpp): it keeps them, its table always,
  // and its fusion and segment settings until t moves one away from where flat started, then
  // follows flat there. The level inside a host keeps its own. current_tuning() is flat's with
  // the threshold. The grouped allreduce packs its tensors itself, so the fusion settings change
  // only flat's calls. Every rank must retune to the same threshold: mismatch_error otherwise
  // (it is agreed by an allreduce on flat).
  static constexpr bool retunable = true;
  tuning current_tuning();
  void retune(const tuning& t);

 private:
  // The allreduce of `data` in place: hierarchical from the threshold, else flat.
  void reduce_in_place(tensor_view data, reduce_op op);
  void reduce_grouped(const std::vector<tensor_view>& tensors, reduce_op op);
  template <class F>
  void run(const char* what, F&& f);
  template <class F>
  work post(F&& f);
  template <class Start>
  work post_p2p(Start&& start);

  any_communicator flat_;
  hierarchical h_;
  std::size_t threshold_;
  // Where flat and the level across hosts started, taken at the first retune().
  std::optional<std::pair<tuning, tuning>> started_;
  std::string name_;
  std::uint64_t calls_ = 0;
  std::vector<unsigned char> packed_;  // a grouped allreduce's tensors, side by side
  detail::progress progress_;          // last: stopped (queue run) before the rest goes
};

}  // namespace distcomm
