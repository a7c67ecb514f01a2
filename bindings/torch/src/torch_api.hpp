// What differs between the torch versions the binding builds against, in this file alone:
//  * torch 1.13 (Debian 12's python3-torch): a backend is a c10d::ProcessGroup, and
//    Backend.register_backend takes (name, creator);
//  * torch 2.x: a backend is a c10d::Backend, which 2.x's ProcessGroup holds per device type;
//    it is asked its sequence number for the group (TORCH_DISTRIBUTED_DEBUG=DETAIL checks it as
//    a group is made), what it supports (splitting, shrinking, coalescing), and register_backend
//    takes the device types it serves;
//  * torch 2.1: FSDP's coalesced forms become members of c10d::Backend;
//  * torch 2.13: ATen's headers need C++20 (../cmake/torch_of_python.cmake says so to the build);
//  * torch 2.14: the single-tensor collectives are renamed after torchcomms' scheme
//    (all_gather_single, reduce_scatter_single, all_to_all_single, gather_single and their
//    *_coalesced forms); the old names stay as forwarders;
//  * torch's own flight recorder (2.11 and 2.15 have one; 1.13 not), whose dumps torch's analyzer
//    reads.
// The binding derives from torch_backend, implements the single-tensor collectives under names
// of its own (allgather_flat, ...), which torch_backend maps onto torch's names of the version
// built against, and never names either base.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

// True when the torch built against is `major.minor` or later.
#define DISTCOMM_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// A torch with a flight recorder of its own (FlightRecorder.hpp), whose pickled dumps torch's
// analyzer reads: torch_flight_recorder.cpp writes DistComm's dumps in that form too.
#if __has_include(<torch/csrc/distributed/c10d/FlightRecorder.hpp>)
#define DISTCOMM_TORCH_HAS_FLIGHT_RECORDER 1
// Its analyzer before 2.15 (2.11's) reads only entries named after NCCL or XCCL
// ("nccl:all_reduce") and fewer collectives (not "barrier", nor the uneven forms); 2.15's reads
// any backend's name.
#define DISTCOMM_TORCH_ANALYZER_READS_ANY_NAME DISTCOMM_TORCH_AT_LEAST(2, 15)
#else
#define DISTCOMM_TORCH_HAS_FLIGHT_RECORDER 0
#endif

namespace distcomm::torch_binding {

#if TORCH_VERSION_MAJOR >= 2
using torch_backend_base = c10d::Backend;
#else
using torch_backend_base = c10d::ProcessGroup;
#endif

using work_ptr = c10::intrusive_ptr<c10d::Work>;

// The timeout torch gives a group whose program named none (init_process_group, new_group,
// split_group without timeout=): 30 minutes in every version.
#if TORCH_VERSION_MAJOR >= 2
inline constexpr std::chrono::milliseconds torch_default_timeout = ::kBackendDefaultTimeout;
#else
inline constexpr std::chrono::milliseconds torch_default_timeout = ::kProcessGroupDefaultTimeout;
#endif

// The base of the binding's backend, with what every torch version asks of it.
class torch_backend : public torch_backend_base {
 public:
  torch_backend(int rank, int size) : torch_backend_base(rank, size) {}

  // The single-tensor collectives, whatever torch calls them.
  // Every rank's `input` into `output`, in rank order.
  virtual work_ptr allgather_flat(at::Tensor& output, at::Tensor& input,
                                  const c10d::AllgatherOptions& opts) = 0;
  // Block `rank` of the ranks' `input`s, reduced, into `output`.
  virtual work_ptr reduce_scatter_flat(at::Tensor& output, at::Tensor& input,
                                       const c10d::ReduceScatterOptions& opts) = 0;
  // Rows of `input` to every rank (`input_splits` rows each, or equal parts), rows from every
  // rank into `output`.
  virtual work_ptr alltoall_flat(at::Tensor& output, at::Tensor& input,
                                 std::vector<int64_t>& output_splits,
                                 std::vector<int64_t>& input_splits,
                                 const c10d::AllToAllOptions& opts) = 0;
  // Every rank's `input` into the root's `output`, in rank order.
  virtual work_ptr gather_flat(at::Tensor& output, at::Tensor& input,
                               const c10d::GatherOptions& opts) = 0;
  // allgather_flat (reduce_scatter_flat) of each pair, in one collective (FSDP's).
  virtual work_ptr allgather_flat_coalesced(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const c10d::AllgatherOptions& opts) = 0;
  virtual work_ptr reduce_scatter_flat_coalesced(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::ReduceScatterOptions& opts) = 0;

#if DISTCOMM_TORCH_AT_LEAST(2, 14)
  work_ptr all_gather_single(at::Tensor& output, at::Tensor& input,
                             const c10d::AllgatherOptions& opts) final {
    return allgather_flat(output, input, opts);
  }
  work_ptr reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                 const c10d::ReduceScatterOptions& opts) final {
    return reduce_scatter_flat(output, input, opts);
  }
  work_ptr all_to_all_single(at::Tensor& output, at::Tensor& input,
                             std::vector<int64_t>& output_splits,
                             std::vector<int64_t>& input_splits,
                             const c10d::AllToAllOptions& opts) final {
    return alltoall_flat(output, input, output_splits, input_splits, opts);
  }
  work_ptr gather_single(at::Tensor& output, at::Tensor& input,
                         const c10d::GatherOptions& opts) final {
    return gather_flat(output, input, opts);
  }
  work_ptr all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                       std::vector<at::Tensor>& inputs,
                                       const c10d::AllgatherOptions& opts) final {
    return allgather_flat_coalesced(outputs, inputs, opts);
  }
  work_ptr reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::ReduceScatterOptions& opts) final {
    return reduce_scatter_flat_coalesced(outputs, inputs, opts);
  }
#else
  work_ptr _allgather_base(at::Tensor& output, at::Tensor& input,
                           const c10d::AllgatherOptions& opts) final {
    return allgather_flat(output, input, opts);
  }
  work_ptr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                const c10d::ReduceScatterOptions& opts) final {
    return reduce_scatter_flat(output, input, opts);
  }
  work_ptr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                         std::vector<int64_t>& input_splits,
                         const c10d::AllToAllOptions& opts) final {
    return alltoall_flat(output, input, output_splits, input_splits, opts);
  }
#if DISTCOMM_TORCH_AT_LEAST(2, 1)
  work_ptr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) final {
    return allgather_flat_coalesced(outputs, inputs, opts);
  }
  work_ptr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::ReduceScatterOptions& opts) final {
    return reduce_scatter_flat_coalesced(outputs, inputs, opts);
  }
#endif
#endif

  // Every rank of a group counts the collectives it starts (not its sends and receives), in the
  // same order: the sequence number PyTorch compares across ranks. Torch 2.14 made setting it a
  // deprecated no-op of its own (numbers start at 0 on every rank, as here).
#if !DISTCOMM_TORCH_AT_LEAST(2, 14)
  void setSequenceNumberForGroup() override {}
#endif
  std::uint64_t getSequenceNumberForGroup() override { return sequence_; }

#if TORCH_VERSION_MAJOR >= 2
  // What the group can do, as torch 2.x asks: split (split_group) and shrink (shrink_group), yes;
  // coalescing in torch's sense (startCoalescing/endCoalescing around calls made one by one), no:
  // torch then sends what it coalesces through the *_coalesced calls, each one collective here.
  bool supportsSplitting() const override { return true; }
  bool supportsShrinking() const override { return true; }
  bool supportsCoalescing() const override { return false; }
#endif

 protected:
  void count_collective() noexcept { ++sequence_; }

 private:
  std::uint64_t sequence_ = 0;
};

}  // namespace distcomm::torch_binding
