// distcomm::torch_binding::process_group: a torch.distributed backend (c10d::ProcessGroup in
// torch 1.13, c10d::Backend in 2.x: torch_api.hpp) over a distcomm::any_communicator. Every call
// validates its tensors on the caller's thread, posts the collective to the communicator's progress
// thread and returns at once with a collective_work (work.hpp); collectives run in the order they
// were called, as PyTorch requires of every rank. Where PyTorch passes lists (allgather, gather,
// scatter, reduce_scatter, alltoall), the list is staged through one contiguous tensor and copied
// back before the work completes.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "tensors.hpp"
#include "torch_api.hpp"

namespace distcomm::torch_binding {

class process_group final : public torch_backend {
 public:
  // Connects rank `rank` of `size` through `store` (the group's, from init_process_group or
  // new_group) over the backend DISTCOMM_BACKEND names, else backend_for(size). Collective over
  // the group's ranks; rendezvous_error or timeout_error (RuntimeError in Python) within
  // `timeout` when they do not meet.
  process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                std::chrono::milliseconds timeout);
  // Lets the GIL go while the transport closes (see the definition).
  ~process_group() override;

  const std::string getBackendName() const override { return "distcomm"; }
  // The transport and strategy under it: "gloo/auto".
  std::string transport() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  // FSDP's coalesced forms: one allgather (reduce-scatter) of every pair's tensors at once.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) DISTCOMM_TORCH_2_1_OVERRIDE;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) DISTCOMM_TORCH_2_1_OVERRIDE;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // allreduce() of a sparse COO tensor (sparse.cpp).
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(const at::Tensor& t,
                                                  const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> started(c10d::OpType type, distcomm::work w,
                                         std::vector<at::Tensor> outputs,
                                         std::vector<at::Tensor> inputs = {},
                                         std::function<void()> finish = {});
  // The same for a collective on `stage`'s views: its host copies live until it completed, and
  // its results go back into the CUDA tensors before the work completes.
  c10::intrusive_ptr<c10d::Work> started(const host_staging& stage, c10d::OpType type,
                                         distcomm::work w, std::vector<at::Tensor> outputs,
                                         std::vector<at::Tensor> inputs = {},
                                         std::function<void()> finish = {});

  config cfg_;
  std::shared_ptr<store>
      kv_;  // the group's store, for as long as the group (ucx's teardown meets there)
  any_communicator comm_;
};

// The transport a group of `size` ranks gets when DISTCOMM_BACKEND names none: local for one
// rank; shm when every rank runs on this host; else gloo, else ucx (whichever is built;
// docs/PERFORMANCE.md, "Allreduce, 2 processes": gloo's ring moves the most at the sizes DDP's
// buckets have). mpi only when named, and only for the whole MPI_COMM_WORLD.
std::string backend_for(int size, bool one_host);

}  // namespace distcomm::torch_binding
