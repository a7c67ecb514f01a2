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

#include "call_order.hpp"
#include "distcomm/any_communicator.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "tensors.hpp"
#include "torch_api.hpp"
#include "work.hpp"

namespace distcomm::torch_binding {

// What torch says of a group as it makes it: its name ("0" for the default group) and the global
// ranks of its members, in group order. The group's flight recorder takes them (trace/
// recorder_names.hpp): the dumps of a torch job name each group alike on every member, even one
// that only some ranks made.
struct torch_group {
  std::string name;
  std::vector<int> global_ranks;
};

class process_group final : public torch_backend {
 public:
  // Connects rank `rank` of `size` through `store` (the group's, from init_process_group or
  // new_group) over the backend DISTCOMM_BACKEND names, else backend_for(size). Collective over
  // the group's ranks; rendezvous_error or timeout_error (RuntimeError in Python) within
  // `timeout` when they do not meet.
  process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                std::chrono::milliseconds timeout, const torch_group& named = {});
  // The group of `comm`, made of `parent`'s ranks (shrink): its settings and store.
  process_group(const process_group& parent, any_communicator comm);
  // Lets the GIL go while the transport closes (see the definition).
  ~process_group() override;

  const std::string getBackendName() const override { return "distcomm"; }
  // The transport and strategy under it: "gloo/auto".
  std::string transport() const;

#if TORCH_VERSION_MAJOR >= 2
  // split_group: the ranks of `ranks` (ranks of this group, in the new group's order) connect
  // anew through `store`, the child's; nullptr on a rank not listed.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // shrink_group: DistComm's shrink (communicator::shrink), the survivors agreeing through the
  // group's store; refused, naming them, when the ranks still alive are not the ones kept.
  bool supportsShrinking() const override;
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude,
                                           int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts) override;
  // Both close the transport (collectives in flight end first, with an error within the group's
  // timeout where a peer does not take part: DistComm cannot cancel one alone); every call
  // after them is refused, saying so.
  void shutdown() override;
  void abort() override;
  // How the group's first failed collective ended (SUCCESS while none has), as torch asks it.
  c10d::ErrorType getError() override;
  // What torch reads back of the group (split_group clones it for the child): the backend's
  // name and the group's timeout.
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
#endif

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
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // The single-tensor collectives, under the names torch_backend maps torch's onto.
  work_ptr allgather_flat(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  work_ptr reduce_scatter_flat(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  work_ptr alltoall_flat(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                         std::vector<int64_t>& input_splits,
                         const c10d::AllToAllOptions& opts) override;
  work_ptr gather_flat(at::Tensor& output, at::Tensor& input,
                       const c10d::GatherOptions& opts) override;
  // FSDP's coalesced forms: one allgather (reduce-scatter) of every pair's tensors at once.
  work_ptr allgather_flat_coalesced(std::vector<at::Tensor>& outputs,
                                    std::vector<at::Tensor>& inputs,
                                    const c10d::AllgatherOptions& opts) override;
  work_ptr reduce_scatter_flat_coalesced(std::vector<at::Tensor>& outputs,
                                         std::vector<at::Tensor>& inputs,
                                         const c10d::ReduceScatterOptions& opts) override;

 private:
  // allreduce() of a sparse COO tensor (sparse.cpp).
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(const at::Tensor& t,
                                                  const c10d::AllreduceOptions& opts);
  // The work of `call` (a DistComm collective, blocking), which the group's call_order runs:
  // `outputs` what it holds, `inputs` kept until it ended, `finish` the copy-out.
  work_ptr ran(c10d::OpType type, std::function<void()> call, std::vector<at::Tensor> outputs,
               std::vector<at::Tensor> inputs = {}, std::function<void()> finish = {});
  // The same for a collective on `stage`'s views: its host copies live until it ended, and its
  // results go back into the CUDA tensors before the work completes.
  work_ptr ran(const host_staging& stage, c10d::OpType type, std::function<void()> call,
               std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs = {},
               std::function<void()> finish = {});
  // The work of a message `post` posts (DistComm's non-blocking send or receive), posted in the
  // group's order; it completes in the background, when DistComm's does.
  work_ptr posted(const host_staging& stage, c10d::OpType type,
                  std::function<distcomm::work()> post, std::vector<at::Tensor> outputs,
                  std::vector<at::Tensor> inputs = {}, std::function<void()> finish = {});
  // `done`'s work, its `task` queued in the group's order; refused once the group is closed.
  work_ptr queued(const std::shared_ptr<completion>& done, std::function<void()> task);

  // The communicator, or the refusal of a group that was shut down or aborted.
  any_communicator& comm();
  // Throws, saying what closed the group and what to do, when `closed`.
  void refuse_if(bool closed) const;
  // Closes the communicator, the GIL let go meanwhile (see the destructor).
  void close() noexcept;
  // What getBackendOptions() answers (torch 2.x), from the settings.
  void keep_options();

  config cfg_;
  std::shared_ptr<store>
      kv_;  // the group's store, for as long as the group (ucx's teardown meets there)
  any_communicator comm_;
  call_order order_;                 // after comm_: closed, what it queued run, before comm_ closes
  const char* closed_by_ = nullptr;  // "shutdown()" or "abort()" once called
  bool closed_ = false;              // comm_ is gone
  // How the group's first failed collective ended (work.hpp), as its works set it.
  std::shared_ptr<group_status> status_ = std::make_shared<group_status>();
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<Options> options_;
#endif
};

// The transport a group of `size` ranks gets when DISTCOMM_BACKEND names none: local for one
// rank; shm when every rank runs on this host; else gloo, else ucx (whichever is built;
// docs/PERFORMANCE.md, "Allreduce, 2 processes": gloo's ring moves the most at the sizes DDP's
// buckets have). mpi only when named, and only for the whole MPI_COMM_WORLD.
std::string backend_for(int size, bool one_host);

}  // namespace distcomm::torch_binding
