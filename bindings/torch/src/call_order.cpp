#include "call_order.hpp"

#include <utility>

namespace distcomm::torch_binding {

namespace {

// The order whose thread this is, if any.
thread_local const void* own_order = nullptr;

}  // namespace

call_order::call_order() = default;

call_order::~call_order() { close(); }

bool call_order::on_thread_of(const std::shared_ptr<const void>& token) noexcept {
  return own_order == token.get();
}

void call_order::post(std::function<void()> task) {
  if (on_own_thread()) {
    task();
    return;
  }
  std::call_once(started_, [this] { thread_ = std::thread(loop, state_); });
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->queue.push_back(std::move(task));
  }
  state_->cv.notify_one();
}

void call_order::loop(const std::shared_ptr<state>& s) {
  own_order = s.get();
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, and nothing left
    std::function<void()> task = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

void call_order::close() noexcept {
  if (!thread_.joinable()) return;
  if (on_own_thread()) {
    // Dropped from inside a task: what is queued runs now, and the thread, detached, ends when
    // that task returns to its loop.
    std::deque<std::function<void()>> rest;
    {
      const std::lock_guard<std::mutex> lock(state_->mutex);
      rest.swap(state_->queue);
      state_->stopping = true;
    }
    for (auto& task : rest) task();
    thread_.detach();
    return;
  }
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->cv.notify_one();
  thread_.join();
}

}  // namespace distcomm::torch_binding
