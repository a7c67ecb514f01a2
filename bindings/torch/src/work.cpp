#include "work.hpp"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "distcomm/core/error.hpp"

namespace distcomm::torch_binding {

namespace {

// DistComm's error in PyTorch's words, where its tests and users match on them (gloo's "Timed out
// ...", "Connection closed by peer"), the call in parentheses and DistComm's own message after
// them, which says what timed out or closed (this call, or an earlier one that failed the group).
// Anything else as it is.
std::exception_ptr in_torch_words(std::exception_ptr e, c10d::OpType type) {
  try {
    std::rethrow_exception(e);
  } catch (const distcomm::timeout_error& t) {
    return std::make_exception_ptr(std::runtime_error(
        "distcomm: Timed out (" + c10d::opTypeToString(type) + "): " + t.what()));
  } catch (const distcomm::peer_lost_error& p) {
    return std::make_exception_ptr(std::runtime_error(
        "distcomm: Connection closed by peer (" + c10d::opTypeToString(type) + "): " + p.what()));
  } catch (...) {
    return e;
  }
}

// What `e` says of the group, in group_status's values.
int status_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const distcomm::timeout_error&) {
    return 1;
  } catch (const distcomm::peer_lost_error&) {
    return 3;
  } catch (...) {
    return 2;
  }
}

}  // namespace

completion::completion(c10d::OpType type, std::vector<at::Tensor> outputs,
                       std::vector<at::Tensor> inputs, std::function<void()> finish,
                       std::shared_ptr<group_status> status)
    : type_(type),
      outputs_(std::move(outputs)),
      inputs_(std::move(inputs)),
      finish_(std::move(finish)),
      status_(std::move(status)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void completion::end(std::exception_ptr error) noexcept {
  if (!error && finish_) {
    try {
      finish_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  finish_ = nullptr;
  inputs_.clear();  // what the call read may go now
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    ended_ = true;
  }
  cv_.notify_all();
  // Last: the future's callbacks run here, and may start calls, wait on them, or drop the group.
  if (error) {
    int none = 0;
    if (status_) status_->compare_exchange_strong(none, status_of(error));
    future_->setError(in_torch_words(error, type_));
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool completion::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == ::kNoTimeout) {
    cv_.wait(lock, [&] { return ended_; });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return ended_; });
}

collective_work::collective_work(int rank, std::shared_ptr<completion> done,
                                 const call_order& order)
    : c10d::Work(rank, done->type()), done_(std::move(done)), order_(order.token()) {}

bool collective_work::isCompleted() { return done_->future()->completed(); }

bool collective_work::isSuccess() const {
  return done_->future()->completed() && !done_->future()->hasError();
}

std::exception_ptr collective_work::exception() const {
  const auto& f = done_->future();
  return f->completed() && f->hasError() ? f->exception_ptr() : nullptr;
}

std::vector<at::Tensor> collective_work::result() { return done_->outputs(); }

bool collective_work::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(done_->begun() || !call_order::on_thread_of(order_),
              "distcomm: a callback of a collective's future waits on ",
              c10d::opTypeToString(opType_),
              ", called after that collective; it runs after the callback returns (calls run in "
              "the order they were made, what a callback starts first), so it would wait "
              "forever. Chain on its future (then) instead of waiting");
  TORCH_CHECK(done_->wait_for(timeout), "distcomm: ", c10d::opTypeToString(opType_),
              " did not complete within ", timeout.count(),
              " ms (the wait's timeout); it goes on and ends within the group's timeout");
  done_->future()->wait();  // completed just after the copy-out
  if (done_->future()->hasError()) std::rethrow_exception(done_->future()->exception_ptr());
  return true;
}

int collective_work::sourceRank() const {
  TORCH_CHECK(source_ != nullptr, "distcomm: sourceRank() is only for a receive from any rank (",
              c10d::opTypeToString(opType_), " names its peers)");
  done_->future()->wait();
  if (done_->future()->hasError()) std::rethrow_exception(done_->future()->exception_ptr());
  return *source_;
}

void collective_work::abort() {
  TORCH_CHECK(false,
              "distcomm: a collective cannot be aborted alone; it ends with an error within the "
              "group's timeout when a peer does not take part");
}

}  // namespace distcomm::torch_binding
