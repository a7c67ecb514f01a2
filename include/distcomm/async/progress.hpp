// detail::progress: the order in which one communicator's collectives run, and the thread that
// runs the non-blocking ones. Collectives run one at a time, in the order they were started, as
// on a stream. A non-blocking collective is queued and run by the communicator's progress thread
// (started at the first one), so the caller's thread computes meanwhile. A blocking collective is
// the same call waited for, with one shortcut: when nothing is queued or running it runs at once
// on the caller's thread, so a blocking call costs no thread handoff (the 8 B latency figures of
// docs/PERFORMANCE.md are measured this way).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "distcomm/async/work.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail {

class progress {
 public:
  progress() = default;
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  // Runs what is queued, then stops the thread.
  ~progress() { stop(); }

  // Runs f in order with the queued collectives and returns when it has run; f's exception
  // propagates. `what` names the call in the error raised on the progress thread itself (a then()
  // callback waiting on its own communicator would wait for itself).
  template <class F>
  void run(const char* what, F&& f) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (std::this_thread::get_id() == thread_id_) {
      throw invalid_argument_error(
          std::string(what) +
          ": called from a then() callback, on the thread that runs this "
          "communicator's collectives; it would wait for itself (start "
          "the non-blocking form instead, or call it from another thread)");
    }
    if (queue_.empty() && !busy_) {
      busy_ = true;
      lock.unlock();
      const idle_on_exit idle{*this};
      f();
      return;
    }
    lock.unlock();
    post(std::function<void()>(std::forward<F>(f))).wait();
  }

  // Queues f behind everything started before; the progress thread runs it. The work completes
  // with f's exception, if any.
  work post(std::function<void()> f) {
    auto state = std::make_shared<work_state>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        throw error("a collective was started on a communicator that is being destroyed");
      }
      queue_.push_back({std::move(f), state});
      if (!thread_.joinable()) {
        thread_ = std::thread([this] { loop(); });
        thread_id_ = thread_.get_id();
      }
    }
    cv_.notify_all();
    return work(std::move(state));
  }

  // Waits until everything started so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

  // Runs what is queued and joins the thread. Every collective has a deadline, so this ends.
  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && std::this_thread::get_id() != thread_id_) thread_.join();
  }

 private:
  struct entry {
    std::function<void()> run;
    std::shared_ptr<work_state> state;
  };
  struct idle_on_exit {
    progress& p;
    ~idle_on_exit() {
      {
        std::lock_guard<std::mutex> lock(p.mutex_);
        p.busy_ = false;
      }
      p.cv_.notify_all();
    }
  };

  void loop() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return (stopping_ && queue_.empty()) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping, and nothing left
      entry e = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr failure;
      {
        const idle_on_exit idle{*this};
        try {
          e.run();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      e.state->complete(failure);  // then() callbacks run here, with the next call free to start
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<entry> queue_;
  bool busy_ = false;  // a collective is running (inline or on the thread)
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace distcomm::detail
