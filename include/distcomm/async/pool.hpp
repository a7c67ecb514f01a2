// detail::pool: threads for what must not hold up the thread that hands it over. run(f) gives f to
// an idle thread of the pool, and starts a new one when none is idle, so a task that blocks (a
// then() callback waiting on a collective, the way PyTorch's DDP hooks do) never holds up
// another: the pool grows to the number of tasks blocked at once, and its threads wait for the
// next task until the pool stops.
//
// The threads share the pool's state, so a task may drop the last reference to what owns the
// pool (a callback destroying its communicator): stop() called from one of the pool's threads
// joins the others and lets that one go, which ends when its task returns.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace distcomm::detail {

class pool {
 public:
  pool() = default;
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool() { stop(); }

  // Runs f on an idle thread of the pool, a new one when none is idle. f's exceptions are
  // dropped: hand over only what reports its own outcome.
  void run(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->tasks.push_back(std::move(f));
    // Every queued task has an idle thread to take it (idle counts threads not yet woken).
    if (shared_->idle < shared_->tasks.size()) {
      shared_->threads.emplace_back([s = shared_] { work(*s); });
    } else {
      shared_->cv.notify_one();
    }
  }

  // Waits for every task given so far, then joins the threads (all but the calling one, when it
  // is the pool's: that one ends once its task returns). Tasks given meanwhile run too.
  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      shared_->stopping = true;
    }
    shared_->cv.notify_all();
    for (;;) {
      std::vector<std::thread> threads;
      {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        threads.swap(shared_->threads);
      }
      if (threads.empty()) return;
      for (auto& t : threads) {
        if (t.get_id() == std::this_thread::get_id()) {
          t.detach();
        } else {
          t.join();
        }
      }
    }
  }

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    std::size_t idle = 0;  // threads waiting for a task
    bool stopping = false;
    std::vector<std::thread> threads;
  };

  static void work(state& s) {
    std::unique_lock<std::mutex> lock(s.mutex);
    for (;;) {
      ++s.idle;
      s.cv.wait(lock, [&] { return s.stopping || !s.tasks.empty(); });
      --s.idle;
      if (s.tasks.empty()) return;  // stopping, and nothing left
      std::function<void()> f = std::move(s.tasks.front());
      s.tasks.pop_front();
      lock.unlock();
      try {
        f();
      } catch (...) {
        // Tasks report their own outcome (run()).
      }
      f = nullptr;  // what it holds goes outside the lock: it may own the pool
      lock.lock();
    }
  }

  std::shared_ptr<state> shared_ = std::make_shared<state>();
};

}  // namespace distcomm::detail
