// The c10d::Work a distcomm process group returns: it wraps distcomm::work and a c10 Future that
// DistComm's progress thread completes (with the output tensors, or with the collective's error)
// the moment the collective ends, so DDP's Reducer, which chains on getFuture(), overlaps
// communication with the backward pass without any caller waiting. A collective that writes its
// result through a staging tensor copies it out first, on the same thread, before the future
// completes.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "distcomm/async/work.hpp"

namespace distcomm::torch_binding {

// How a group's first failed collective ended, in the values of torch 2.x's c10d::ErrorType:
// 0 none failed, 1 timed out, 2 failed here, 3 a peer was lost.
using group_status = std::atomic<int>;

class collective_work final : public c10d::Work {
 public:
  // `outputs`: what result() and the future hold; `inputs`: tensors the collective reads (or
  // stages through), kept alive until it completes, whatever the caller drops; `finish`: the
  // copy-out, run once on success; `status`: the group's, set when it fails (may be null).
  collective_work(int rank, c10d::OpType type, distcomm::work w, std::vector<at::Tensor> outputs,
                  std::vector<at::Tensor> inputs, std::function<void()> finish = {},
                  std::shared_ptr<group_status> status = nullptr);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // Waits until the collective ends (kNoTimeout) or at most `timeout`, and rethrows its error.
  // After `timeout` it throws; the collective goes on and ends within DistComm's own deadline.
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // A receive from any rank: the sender, once it completed (waits for it first).
  int sourceRank() const override;

  // Makes this the work of a receive from any rank, whose sender DistComm writes to *source.
  void receives_from_any(std::shared_ptr<const int> source) { source_ = std::move(source); }

 private:
  distcomm::work work_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<const int> source_;  // a receive from any rank's sender
};

}  // namespace distcomm::torch_binding
