// detail::progress: the order in which one communicator's collectives run, and the thread that
// runs the non-blocking ones. Collectives run one at a time, in the order they were started, as
// on a stream. A non-blocking collective is queued and run by the communicator's progress thread
// (started at the first one), so the caller's thread computes meanwhile. A blocking collective is
// the same call waited for, with one shortcut: when nothing is queued or running it runs at once
// on the caller's thread, so a blocking call costs no thread handoff (the 8 B latency figures of
// docs/PERFORMANCE.md are measured this way).
//
// A call may leave work in flight when it returns (a posted send or receive): it returns a poll
// function, which the progress thread calls between the calls it runs, backing off from 20 µs to
// 1 ms while nothing completes, until it returns true or throws. The call's work completes then,
// out of order with the later calls, which start meanwhile; two ranks that both isend, then
// irecv, are not waiting for each other. While anything is in flight, blocking calls go through
// the thread too, so that only it touches the transport.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/async/work.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::detail {

// What a call leaves in flight: true once it has completed; throws its error (its own timeout
// included, once past its deadline). Empty: nothing was left.
using poll_fn = std::function<bool()>;

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
    // Until a call is queued there is no thread, no queue and nothing in flight: a blocking call
    // only has to claim the communicator, without the lock (two lock pairs were a tenth of an
    // 8-byte shm allreduce).
    if (!started_.load()) {
      bool free_now = false;
      if (busy_.compare_exchange_strong(free_now, true)) {
        const idle_on_exit done{*this};
        f();
        return;
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (std::this_thread::get_id() == thread_id_) {
      throw invalid_argument_error(
          std::string(what) +
          ": called from a then() callback, on the thread that runs this "
          "communicator's collectives; it would wait for itself (start "
          "the non-blocking form instead, or call it from another thread)");
    }
    bool free_now = false;
    if (queue_.empty() && in_flight_ == 0 && busy_.compare_exchange_strong(free_now, true)) {
      lock.unlock();
      const idle_on_exit done{*this};
      f();
      return;
    }
    lock.unlock();
    post(std::function<void()>(std::forward<F>(f))).wait();
  }

  // Queues f behind everything started before; the progress thread runs it. The work completes
  // with f's exception, if any.
  work post(std::function<void()> f) {
    return post_in_flight([f = std::move(f)]() -> poll_fn {
      f();
      return {};
    });
  }

  // Queues `start` as post() does; what it leaves in flight is polled until done, while the calls
  // behind it run, and the work completes then.
  work post_in_flight(std::function<poll_fn()> start) {
    auto state = std::make_shared<work_state>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) {
        throw error("a collective was started on a communicator that is being destroyed");
      }
      started_.store(true);  // from now on every call takes the lock
      queue_.push_back({std::move(start), state});
      if (!thread_.joinable()) {
        thread_ = std::thread([this] { loop(); });
        thread_id_ = thread_.get_id();
      }
    }
    cv_.notify_all();
    return work(std::move(state));
  }

  // Waits until everything started so far has run, and what it left in flight has completed.
  void drain() {
    waiting_.fetch_add(1);  // a call ending without the lock then wakes this wait
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return queue_.empty() && !busy_ && in_flight_ == 0; });
    }
    waiting_.fetch_sub(1);
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
    std::function<poll_fn()> start;
    std::shared_ptr<work_state> state;
  };
  struct pending {
    poll_fn poll;
    std::shared_ptr<work_state> state;
  };
  // Releases the communicator and wakes whoever may wait for it: the thread, once started, and
  // drain(). The flags are sequentially consistent: of this store of busy_ and a waiter's store
  // of started_ or waiting_, each side sees the other's, or the waiter sees busy_ false.
  struct idle_on_exit {
    progress& p;
    ~idle_on_exit() {
      p.busy_.store(false);
      if (p.started_.load() || p.waiting_.load() > 0) {
        { const std::lock_guard<std::mutex> lock(p.mutex_); }  // a waiter is in wait(), or sees it
        p.cv_.notify_all();
      }
    }
  };

  void loop() {
    std::vector<pending> polled;  // what the calls left in flight, oldest first
    auto backoff = min_backoff;
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto runnable = [&] { return !queue_.empty() && !busy_; };
      if (polled.empty()) {
        cv_.wait(lock, [&] { return (stopping_ && queue_.empty()) || runnable(); });
        if (queue_.empty()) return;  // stopping, and nothing left
      } else if (!runnable()) {
        cv_.wait_for(lock, backoff, runnable);
      }
      bool free_now = false;
      if (!queue_.empty() && busy_.compare_exchange_strong(free_now, true)) {
        entry e = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        std::exception_ptr failure;
        poll_fn poll;
        {
          const idle_on_exit idle{*this};
          try {
            poll = e.start();
          } catch (...) {
            failure = std::current_exception();
          }
          if (poll) {
            std::lock_guard<std::mutex> count(mutex_);
            ++in_flight_;
          }
        }
        if (poll) {
          polled.push_back({std::move(poll), std::move(e.state)});
          backoff = min_backoff;
        } else {
          e.state->complete(failure);  // then() callbacks run here, the next call free to start
        }
        continue;
      }
      lock.unlock();
      backoff = poll_all(polled) ? min_backoff : std::min(backoff * 2, max_backoff);
    }
  }

  // Polls what is in flight once; completes what is done. True when something was.
  bool poll_all(std::vector<pending>& polled) {
    bool any = false;
    for (std::size_t i = 0; i < polled.size();) {
      std::exception_ptr failure;
      bool done = true;
      try {
        done = polled[i].poll();
      } catch (...) {
        failure = std::current_exception();
      }
      if (!done) {
        ++i;
        continue;
      }
      std::shared_ptr<work_state> state = std::move(polled[i].state);
      polled.erase(polled.begin() + static_cast<std::ptrdiff_t>(i));  // the request, released
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --in_flight_;
      }
      cv_.notify_all();
      state->complete(failure);
      any = true;
    }
    return any;
  }

  static constexpr std::chrono::microseconds min_backoff{20};
  static constexpr std::chrono::microseconds max_backoff{1000};

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<entry> queue_;
  // A collective is running (inline or on the thread): claimed by compare-and-swap, since a
  // blocking call claims it without the lock until started_.
  std::atomic<bool> busy_{false};
  std::atomic<bool> started_{false};  // a call was queued (the thread exists, or is starting)
  std::atomic<int> waiting_{0};       // drain() calls waiting
  int in_flight_ = 0;                 // calls whose work the thread polls
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace distcomm::detail
