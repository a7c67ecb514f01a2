// What differs between the torch versions the binding builds against, in this file alone:
//  * torch 1.13 (Debian 12's python3-torch, what CI builds against): a backend is a
//    c10d::ProcessGroup, and Backend.register_backend takes (name, creator);
//  * torch 2.x: a backend is a c10d::Backend, which 2.x's ProcessGroup holds per device type;
//    it is asked its sequence number for the group (TORCH_DISTRIBUTED_DEBUG=DETAIL checks it as
//    a group is made), and register_backend takes the device types it serves.
// The binding derives from torch_backend and never names either base.
#pragma once

#include <torch/version.h>

#include <cstdint>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

// Collectives torch 2.1 and later declare on c10d::Backend (FSDP's coalesced forms) and 1.13 does
// not: overrides there, plain members here, compiled alike.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define DISTCOMM_TORCH_2_1_OVERRIDE override
#else
#define DISTCOMM_TORCH_2_1_OVERRIDE
#endif

namespace distcomm::torch_binding {

#if TORCH_VERSION_MAJOR >= 2
using torch_backend_base = c10d::Backend;
#else
using torch_backend_base = c10d::ProcessGroup;
#endif

// The base of the binding's backend, with what every torch version asks of it.
class torch_backend : public torch_backend_base {
 public:
  torch_backend(int rank, int size) : torch_backend_base(rank, size) {}

  // Every rank of a group counts the collectives it starts (not its sends and receives), in the
  // same order: the sequence number PyTorch compares across ranks.
  void setSequenceNumberForGroup() override {}
  std::uint64_t getSequenceNumberForGroup() override { return sequence_; }

 protected:
  void count_collective() noexcept { ++sequence_; }

 private:
  std::uint64_t sequence_ = 0;
};

}  // namespace distcomm::torch_binding
