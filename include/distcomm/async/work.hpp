// distcomm::work: the handle a non-blocking collective returns (iallreduce, ibroadcast, ...) and
// the engine's allreduce_async. It completes once, with success or with the collective's error:
//   auto w = comm.iallreduce(view(grad));   // the caller's thread computes meanwhile
//   ...
//   w.wait();                               // rethrows the collective's error, if any
// wait() has no deadline of its own: the collective behind it has one (DISTCOMM_TIMEOUT), so it
// ends in bounded time. A work is a shared handle (copies see the same completion). The memory a
// collective reads or writes must stay alive until its work is complete.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "distcomm/async/pool.hpp"

namespace distcomm {

namespace detail {
// The completion both ends share: the side that runs the collective calls complete() once.
class work_state {
 public:
  using callback = std::function<void(std::exception_ptr)>;

  bool done() const noexcept { return done_.load(std::memory_order_acquire); }

  // Called once by the side that ran the collective; runs the then() callbacks on this thread, or
  // on the pool given to callbacks_on().
  void complete(std::exception_ptr error = nullptr) noexcept {
    std::vector<callback> run = finish(std::move(error));
    if (run.empty()) return;
    if (pool_) {
      pool_->run([run = std::move(run), e = error_]() mutable {
        for (auto& cb : run) invoke(cb, e);
      });
    } else {
      run_callbacks(run);
    }
  }

  // complete() in two steps, for a side that must not run the callbacks itself: marks the work
  // complete (waiters wake) and hands back the then() callbacks, for run_callbacks() elsewhere.
  std::vector<callback> finish(std::exception_ptr error) noexcept {
    std::vector<callback> run;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done()) return run;
      error_ = std::move(error);
      done_.store(true, std::memory_order_release);
      run.swap(callbacks_);
    }
    cv_.notify_all();
    return run;
  }
  void run_callbacks(std::vector<callback>& run) noexcept {
    for (auto& cb : run) invoke(cb, error_);
  }

  // complete() runs the callbacks on `p`'s threads instead of its own (an engine's thread).
  void callbacks_on(std::shared_ptr<pool> p) { pool_ = std::move(p); }

  template <class Until>
  bool wait_until(const Until& until) {
    if (done()) return true;
    waiting_guard guard(waiters_.get());
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_until(lock, until, [&] { return done(); });
  }
  void wait() {
    if (done()) return;
    waiting_guard guard(waiters_.get());
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done(); });
  }

  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  void then(callback cb) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!done()) {
        callbacks_.push_back(std::move(cb));
        return;
      }
    }
    invoke(cb, error_);  // already complete: on the caller's thread, now
  }

  // A counter raised while a thread waits on this work: the engine reads it to tell a rank that
  // is blocked on what it submitted from one that is still computing.
  void count_waiters_in(std::shared_ptr<std::atomic<int>> counter) {
    waiters_ = std::move(counter);
  }

 private:
  struct waiting_guard {
    explicit waiting_guard(std::atomic<int>* c) : c_(c) {
      if (c_) c_->fetch_add(1, std::memory_order_acq_rel);
    }
    ~waiting_guard() {
      if (c_) c_->fetch_sub(1, std::memory_order_acq_rel);
    }
    std::atomic<int>* c_;
  };

  static void invoke(callback& cb, const std::exception_ptr& error) noexcept {
    try {
      cb(error);
    } catch (...) {
      // A callback's own failure cannot reach anyone: the collective's outcome stands.
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::vector<callback> callbacks_;
  std::shared_ptr<std::atomic<int>> waiters_;
  std::shared_ptr<pool> pool_;
};
}  // namespace detail

class [[nodiscard]] work {
 public:
  // An empty work: complete, successful.
  work() = default;
  explicit work(std::shared_ptr<detail::work_state> s) : state_(std::move(s)) {}

  static work completed() { return work(); }
  static work failed(std::exception_ptr e) {
    auto s = std::make_shared<detail::work_state>();
    s->complete(std::move(e));
    return work(std::move(s));
  }

  // Waits for completion and rethrows the collective's error.
  void wait() const {
    if (!state_) return;
    state_->wait();
    rethrow();
  }
  // Waits until `until` at most: true when complete (the error, if any, rethrown), false when
  // `until` came first. The collective goes on either way.
  template <class Clock, class Duration>
  bool wait(std::chrono::time_point<Clock, Duration> until) const {
    if (!state_) return true;
    if (!state_->wait_until(until)) return false;
    rethrow();
    return true;
  }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    return wait(std::chrono::steady_clock::now() + d);
  }
  // Whether the collective has completed, with success or failure; never blocks or throws.
  bool test() const noexcept { return !state_ || state_->done(); }
  // The collective's error once complete (nullptr on success or while running).
  std::exception_ptr error() const { return state_ && state_->done() ? state_->error() : nullptr; }
  // Calls cb(error) once the collective completes (error is nullptr on success): on a thread of
  // the communicator's (or engine's) that runs nothing else meanwhile, or at once on this thread
  // when already complete. cb may start collectives, wait on them, or destroy the communicator:
  // the collectives behind it go on, on another thread.
  const work& then(std::function<void(std::exception_ptr)> cb) const {
    if (state_) {
      state_->then(std::move(cb));
    } else {
      cb(nullptr);
    }
    return *this;
  }

 private:
  void rethrow() const {
    if (auto e = state_->error()) std::rethrow_exception(e);
  }
  std::shared_ptr<detail::work_state> state_;
};

}  // namespace distcomm
