// distcomm::engine: the gradient averager a framework embeds (Horovod's core, one per
// communicator, no global state). Tensors are submitted by name as backward produces them, in any
// order on each rank; the engine's thread agrees with the other ranks on which are ready
// (engine/negotiation.hpp), runs them in the same order on every rank, the allreduces ready in one
// cycle as one grouped allreduce (fused by the communicator's Tensor Fusion), and completes each
// tensor's work:
//   distcomm::engine eng(comm);                      // comm: an any_communicator
//   auto w = eng.allreduce_async("fc1.weight", view(grad), reduce_op::avg);   // in a hook
//   ...
//   w.wait();                                        // or eng.synchronize() for all of them
// A rank with fewer steps than the others calls join(): the others go on without it (it adds
// nothing; avg divides by the ranks that contributed) until every rank has joined. Ranks that
// submit different names, or a name with another dtype, count or op, get a mismatch_error on every
// rank naming the tensor, the ranks and the field. While an engine runs on a communicator, use the
// communicator only through the engine. docs/ENGINE.md has the protocol and its costs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distcomm/any_communicator.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/autotune/choice.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm {

class engine {
 public:
  // Runs over `comm`, which must outlive the engine, with comm.settings() (cycle time, stall
  // warning, timeout, timeline). Collective: every rank makes its engine over the same
  // communicator.
  explicit engine(any_communicator& comm);
  engine(any_communicator& comm, const config& settings);
  // Tensors over `data`, the ranks' agreement over `control`, a communicator over the same ranks
  // that moves host memory: what a device backend needs (nccl for the tensors, gloo or mpi for
  // the agreement, as Horovod pairs them). Both must outlive the engine and be used through it
  // only.
  engine(any_communicator& data, any_communicator& control, const config& settings);
  // Tells the other ranks this one is leaving (their pending tensors then fail, naming it) and
  // stops the engine's thread; works still pending here fail. Bounded by DISTCOMM_TIMEOUT.
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Every rank's `data` becomes the reduction of all ranks' `data` under `name`. invalid_argument_
  // error at once for a bad view or a name pending already on this rank.
  work allreduce_async(const std::string& name, tensor_view data, reduce_op op = reduce_op::avg);
  // Every rank's `data` becomes root's.
  work broadcast_async(const std::string& name, tensor_view data, int root);
  // `out` holds size() blocks of in.count elements, block r from rank r.
  work allgather_async(const std::string& name, tensor_view in, tensor_view out);

  // This rank has no more steps: the others' allreduces go on without it until every rank has
  // joined, when the returned work completes on every rank (and the engine is as before the
  // first join). Host backends only.
  work join();

  // Waits for every work this rank submitted so far; rethrows the first error among them.
  void synchronize();

  // After a work failed with peer_lost_error or timeout_error, every survivor calls it: the
  // engine stops (its pending works fail), the communicator it runs over, the caller's, becomes
  // the survivors' (comm = comm.shrink(), communicator.hpp: ranks renumbered in order,
  // excluded_error for a rank the others gave up on), and the engine starts anew over it with
  // nothing pending. Not for an engine over a data and a control communicator
  // (invalid_argument_error: shrink both and make a new engine).
  void shrink();

  int rank() const;
  int size() const;

  struct statistics {
    std::uint64_t cycles = 0;       // negotiations with the other ranks
    std::uint64_t full_cycles = 0;  // of those, full exchanges of names (the rest: cache bits)
    std::uint64_t collectives = 0;  // collectives run for tensors
    std::uint64_t tensors = 0;      // tensors completed
  };
  statistics stats() const;

  // The autotuner's state (DISTCOMM_AUTOTUNE, DISTCOMM_AUTOTUNE_FILE; autotune/tuner.hpp):
  // whether it runs or a saved choice is in use, whether its search has ended, the settings in
  // use and every candidate measured so far. Inactive without either setting.
  autotune::status autotune() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace distcomm
