// The c10d::Work a distcomm process group returns, and the c10 Future DDP's Reducer chains on
// (getFuture()). The group's call_order runs the call; when it has ended the work completes: a
// collective's copy-out (through a staging tensor) runs first, then the future completes with the
// output tensors, or with the call's error, its callbacks running there and then, on the group's
// thread (call_order.hpp says why). A message (send, recv) completes on DistComm's progress
// thread when it has arrived or left.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "call_order.hpp"
#include "distcomm/async/work.hpp"

namespace distcomm::torch_binding {

// How a group's first failed call ended, in the values of torch 2.x's c10d::ErrorType:
// 0 none failed, 1 timed out, 2 failed here, 3 a peer was lost.
using group_status = std::atomic<int>;

// What a call's task and its work share: the work's outcome, whichever thread ends it.
class completion {
 public:
  // `outputs`: what result() and the future hold; `inputs`: tensors the call reads (or stages
  // through), kept until it ended, whatever the caller drops; `finish`: the copy-out, run once
  // on success; `status`: the group's, set when the call fails (may be null).
  completion(c10d::OpType type, std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
             std::function<void()> finish, std::shared_ptr<group_status> status);

  // The task began the call (wait() on the group's own thread refuses a call not begun).
  void begin() noexcept { begun_ = true; }
  bool begun() const noexcept { return begun_; }
  // The call ended, with `error` (null: it succeeded): the copy-out, then the future. Once.
  void end(std::exception_ptr error) noexcept;
  // Waits until it ended, at most `timeout` (kNoTimeout: for good); false when it has not.
  bool wait_for(std::chrono::milliseconds timeout);

  c10d::OpType type() const noexcept { return type_; }
  const std::vector<at::Tensor>& outputs() const noexcept { return outputs_; }
  const c10::intrusive_ptr<c10::ivalue::Future>& future() const noexcept { return future_; }

 private:
  const c10d::OpType type_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> inputs_;
  std::function<void()> finish_;
  const std::shared_ptr<group_status> status_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> begun_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool ended_ = false;
};

class collective_work final : public c10d::Work {
 public:
  // The work of `done`'s call, which the group's `order` runs.
  collective_work(int rank, std::shared_ptr<completion> done, const call_order& order);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  // Waits until the call ends (kNoTimeout) or at most `timeout`, and rethrows its error. After
  // `timeout` it throws; the call goes on and ends within DistComm's own deadline.
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return done_->future(); }
  // A receive from any rank: the sender, once it completed (waits for it first).
  int sourceRank() const override;

  // Makes this the work of a receive from any rank, whose sender DistComm writes to *source.
  void receives_from_any(std::shared_ptr<const int> source) { source_ = std::move(source); }

 private:
  const std::shared_ptr<completion> done_;
  const std::shared_ptr<const void> order_;  // the group's call_order (token()), which may go first
  std::shared_ptr<const int> source_;        // a receive from any rank's sender
};

}  // namespace distcomm::torch_binding
