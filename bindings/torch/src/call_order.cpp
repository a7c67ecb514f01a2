#include "call_order.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/log.hpp"

namespace distcomm::torch_binding {

struct call_order::state {
  explicit state(std::chrono::milliseconds p) : patience(p) {}

  std::mutex mutex;
  std::condition_variable cv;       // the thread's: a task queued, or stopping
  std::condition_variable settled;  // settle_all()'s: idle, or a call ended
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  int busy = 0;             // tasks running, and holds not dropped
  std::uint64_t ended = 0;  // tasks run, and holds dropped
  const std::chrono::milliseconds patience;

  bool idle() const { return queue.empty() && busy == 0; }
  void one_ended() {  // under mutex
    --busy;
    ++ended;
    settled.notify_all();
  }
};

namespace {

// The order whose thread this is, if any.
thread_local const void* own_order = nullptr;

// A call ends within its group's timeout; this covers the error's way out and its callbacks.
constexpr std::chrono::seconds settle_slack{10};

// Every order that has started its thread, for settle_all(). Never destroyed: settle_all() runs
// at the interpreter's exit, and orders may outlive the static objects.
struct order_list {
  std::mutex mutex;
  std::vector<std::weak_ptr<call_order::state>> orders;
};

order_list& the_orders() {
  static auto* list = new order_list();
  return *list;
}

void list_order(const std::shared_ptr<call_order::state>& s) {
  order_list& list = the_orders();
  const std::lock_guard<std::mutex> lock(list.mutex);
  auto keep = list.orders.begin();
  for (auto& o : list.orders) {
    if (!o.expired()) *keep++ = std::move(o);
  }
  list.orders.erase(keep, list.orders.end());
  list.orders.push_back(s);
}

}  // namespace

call_order::busy::busy(std::shared_ptr<state> s) : s_(std::move(s)) {}

call_order::busy::~busy() {
  if (!s_) return;  // moved from
  const std::lock_guard<std::mutex> lock(s_->mutex);
  s_->one_ended();
}

call_order::call_order(std::chrono::milliseconds calls_end_within)
    : state_(std::make_shared<state>(calls_end_within + settle_slack)) {}

call_order::~call_order() { close(); }

bool call_order::on_thread_of(const std::shared_ptr<const void>& token) noexcept {
  return own_order == token.get();
}

void call_order::post(std::function<void()> task) {
  if (on_own_thread()) {
    task();
    return;
  }
  std::call_once(started_, [this] {
    thread_ = std::thread(loop, state_);
    list_order(state_);
  });
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->queue.push_back(std::move(task));
  }
  state_->cv.notify_one();
}

call_order::busy call_order::hold() const {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    ++state_->busy;
  }
  return busy(state_);
}

void call_order::loop(const std::shared_ptr<state>& s) {
  own_order = s.get();
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->cv.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, and nothing left
    std::function<void()> task = std::move(s->queue.front());
    s->queue.pop_front();
    ++s->busy;
    lock.unlock();
    task();
    task = nullptr;  // what it held goes here, outside the lock (tensors take the GIL)
    lock.lock();
    s->one_ended();
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

void call_order::settle_all() noexcept {
  std::vector<std::shared_ptr<state>> orders;
  {
    order_list& list = the_orders();
    const std::lock_guard<std::mutex> lock(list.mutex);
    for (const auto& o : list.orders) {
      if (auto s = o.lock()) orders.push_back(std::move(s));
    }
  }
  for (const auto& s : orders) {
    std::unique_lock<std::mutex> lock(s->mutex);
    while (!s->idle()) {
      const std::uint64_t ended = s->ended;
      if (!s->settled.wait_for(lock, s->patience, [&] { return s->idle(); }) &&
          s->ended == ended) {
        try {
          log(log_level::warn,
              "torch: the program ends while a group's call has not ended for " +
                  std::to_string(s->patience.count() / 1000) +
                  " s (its timeout and a margin); Python may abort the process as it "
                  "finalizes. Wait for every work, or call destroy_process_group(), before the "
                  "program ends");
        } catch (...) {
        }
        break;
      }
    }
  }
}

}  // namespace distcomm::torch_binding
