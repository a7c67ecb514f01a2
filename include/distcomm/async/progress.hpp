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
//
// "The thread" is a role, not one thread: a work's then() callbacks run on the thread that
// completed it, which first hands the role to another thread of a pool (async/pool.hpp) when
// anything is queued or in flight. A callback may so start collectives on the same communicator
// and wait on them, as PyTorch's DDP hooks (PowerSGD) do, or destroy the communicator.
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

#include "distcomm/async/pool.hpp"
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
  // propagates. `what` names the call in the error raised on the progress thread itself, inside a
  // collective's own start (it would wait for itself).
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
    if (std::this_thread::get_id() == loop_thread_) {
      throw invalid_argument_error(std::string(what) +
                                   ": called while this communicator's progress thread starts "
                                   "or polls a collective; it would wait for itself");
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
      if (!looping_) {
        looping_ = true;
        threads_.run([this] { loop(); });
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

  // Runs what is queued and joins the threads; callbacks still running finish first. Every
  // collective has a deadline, so this ends. From a then() callback (one destroying its
  // communicator), that callback's thread is let go and ends when the callback returns.
  void stop() noexcept {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      stopping_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !looping_; });
    }
    threads_.stop();
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

  // The progress thread's role, on a thread of threads_: runs the queue in order and polls what
  // it left in flight, until stopped, or until a work it completes has then() callbacks: those
  // run on this thread, and the role goes to another one of the pool when anything is left.
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    loop_thread_ = std::this_thread::get_id();
    for (;;) {
      const auto runnable = [&] { return !queue_.empty() && !busy_; };
      if (polled_.empty()) {
        cv_.wait(lock, [&] { return (stopping_ && queue_.empty()) || runnable(); });
        if (queue_.empty()) {  // stopping, and nothing left
          leave(lock);
          return;
        }
      } else if (!runnable()) {
        cv_.wait_for(lock, backoff_, runnable);
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
          polled_.push_back({std::move(poll), std::move(e.state)});
          backoff_ = min_backoff;
        } else {
          auto callbacks = e.state->finish(failure);  // the next call free to start
          if (!callbacks.empty()) return hand_over(std::move(e.state), callbacks);
        }
        lock.lock();
        continue;
      }
      lock.unlock();
      std::shared_ptr<work_state> done;
      std::vector<work_state::callback> callbacks;
      const bool any = poll_all(done, callbacks);
      backoff_ = any ? min_backoff : std::min(backoff_ * 2, max_backoff);
      if (!callbacks.empty()) return hand_over(std::move(done), callbacks);
      lock.lock();
    }
  }

  // Gives up the role: to a thread of the pool when anything is queued or in flight (or the
  // next post() starts one), then runs `done`'s callbacks here. Touches nothing of this object
  // after them: a callback may destroy it.
  void hand_over(std::shared_ptr<work_state> done, std::vector<work_state::callback>& callbacks) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!queue_.empty() || !polled_.empty()) {
        loop_thread_ = std::thread::id();
        threads_.run([this] { loop(); });
      } else {
        leave(lock);
      }
    }
    done->run_callbacks(callbacks);
  }

  void leave(std::unique_lock<std::mutex>&) {
    looping_ = false;
    loop_thread_ = std::thread::id();
    cv_.notify_all();  // stop() waits for it
  }

  // Polls what is in flight once and completes what is done, up to the first work with then()
  // callbacks, which it hands back with them. True when something completed.
  bool poll_all(std::shared_ptr<work_state>& done, std::vector<work_state::callback>& callbacks) {
    bool any = false;
    for (std::size_t i = 0; i < polled_.size();) {
      std::exception_ptr failure;
      bool ended = true;
      try {
        ended = polled_[i].poll();
      } catch (...) {
        failure = std::current_exception();
      }
      if (!ended) {
        ++i;
        continue;
      }
      std::shared_ptr<work_state> state = std::move(polled_[i].state);
      polled_.erase(polled_.begin() + static_cast<std::ptrdiff_t>(i));  // the request, released
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --in_flight_;
      }
      cv_.notify_all();
      any = true;
      callbacks = state->finish(failure);
      if (!callbacks.empty()) {
        done = std::move(state);
        return true;
      }
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
  bool looping_ = false;         // a thread has the progress role (or is given it)
  std::thread::id loop_thread_;  // the one that has it now
  std::vector<pending> polled_;  // what the calls left in flight, oldest first (the role's)
  std::chrono::microseconds backoff_ = min_backoff;  // the role's
  pool threads_;  // last: stopped by stop(), before the rest goes
};

}  // namespace distcomm::detail
