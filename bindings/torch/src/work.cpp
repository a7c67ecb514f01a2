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

collective_work::collective_work(int rank, c10d::OpType type, distcomm::work w,
                                 std::vector<at::Tensor> outputs, std::vector<at::Tensor> inputs,
                                 std::function<void()> finish,
                                 std::shared_ptr<group_status> status)
    : c10d::Work(rank, type),
      work_(std::move(w)),
      outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
  // On the thread that completes the collective (DistComm's progress), or here when it already
  // has. The future holds what the callback needs, not this Work, which the caller may drop.
  work_.then([future = future_, outputs = outputs_, inputs = std::move(inputs),
              finish = std::move(finish), type,
              status = std::move(status)](std::exception_ptr error) {
    if (!error && finish) {
      try {
        finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      int none = 0;
      if (status) status->compare_exchange_strong(none, status_of(error));
      future->setError(in_torch_words(error, type));
    } else {
      future->markCompleted(c10::IValue(outputs));
    }
  });
}

bool collective_work::isCompleted() { return future_->completed(); }

bool collective_work::isSuccess() const { return future_->completed() && !future_->hasError(); }

std::exception_ptr collective_work::exception() const {
  return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
}

std::vector<at::Tensor> collective_work::result() { return outputs_; }

bool collective_work::wait(std::chrono::milliseconds timeout) {
  if (timeout != kNoTimeout && !work_.test()) {
    bool ended = false;
    try {
      ended = work_.wait_for(timeout);
    } catch (...) {
      ended = true;  // the future carries the same error, below
    }
    TORCH_CHECK(ended, "distcomm: ", c10d::opTypeToString(opType_), " did not complete within ",
                timeout.count(),
                " ms (the wait's timeout); it goes on and ends within the group's timeout");
  }
  future_->wait();  // the copy-out, if any, finishing on the progress thread
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return true;
}

int collective_work::sourceRank() const {
  TORCH_CHECK(source_ != nullptr, "distcomm: sourceRank() is only for a receive from any rank (",
              c10d::opTypeToString(opType_), " names its peers)");
  future_->wait();
  if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  return *source_;
}

void collective_work::abort() {
  TORCH_CHECK(false,
              "distcomm: a collective cannot be aborted alone; it ends with an error within the "
              "group's timeout when a peer does not take part");
}

}  // namespace distcomm::torch_binding
