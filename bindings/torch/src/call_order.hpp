// call_order: the order in which a group's calls reach DistComm, the same on every rank whatever
// the timing. DistComm runs a communicator's collectives in the order they are called, and every
// rank must call them in the same order; PyTorch's callers do not always: a DDP communication hook
// (PowerSGD's) starts collectives from the callbacks of an earlier collective's future, while the
// backward pass goes on calling the next bucket's hook on another thread, so which of the two
// comes first depends on when the earlier one completed — on each rank its own way. (gloo matches
// them by a tag taken at the call, so there the same race mismatches data.)
//
// The order kept here is NCCL's on a stream: a call runs after every call made before it, and
// whatever a completed call's callbacks start runs right after it, before the calls made
// meanwhile elsewhere. Calls run one at a time on the group's own thread, each to its end (a
// message is only posted; it completes in the background), its work's future completed there,
// callbacks and all; a call made on that thread (from such a callback) runs at once, in place.
// Overlap with the caller's computation is kept: the caller's thread only queues.
//
// A callback may wait on what it starts, but not on a call made after the one it follows (that
// waits behind the callback itself): collective_work::wait() refuses it, naming the cause.
//
// At the interpreter's exit the package waits for every order's calls to end (settle_all(),
// registered with atexit), before Python finalizes: a call lets its tensors go on the group's
// thread, which takes the GIL for that, and Python ends a thread that takes the GIL while it
// finalizes with a forced unwind, of which the process dies ("terminate called without an active
// exception"; tests/test_exit.py).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace distcomm::torch_binding {

class call_order {
 public:
  struct state;  // the order's, shared with its thread and what holds it (call_order.cpp)

  // What keeps the order busy, for settle_all(), until it is dropped: a call's part that ends
  // elsewhere (a message's completion, on DistComm's progress thread) holds one.
  class busy {
   public:
    busy(busy&&) noexcept = default;
    busy& operator=(busy&&) noexcept = default;
    ~busy();

   private:
    friend class call_order;
    explicit busy(std::shared_ptr<state> s);
    std::shared_ptr<state> s_;
  };

  // `calls_end_within`: the group's timeout, within which each call ends (settle_all()'s
  // patience).
  explicit call_order(std::chrono::milliseconds calls_end_within);
  call_order(const call_order&) = delete;
  call_order& operator=(const call_order&) = delete;
  // As close().
  ~call_order();

  // Runs `task` on the group's thread after every task posted before it (which ended), or at
  // once when called on that thread. A task reports its own outcome; it must not throw.
  void post(std::function<void()> task);
  // Whether the calling thread is the group's (inside a task, or a callback it runs).
  bool on_own_thread() const noexcept { return on_thread_of(token()); }
  // What names this order for as long as something keeps it, the order gone or not (a work may
  // outlive its group), and whether the calling thread is that order's.
  std::shared_ptr<const void> token() const noexcept { return state_; }
  static bool on_thread_of(const std::shared_ptr<const void>& token) noexcept;
  // Runs what is queued, then stops the thread. On the group's own thread (the group dropped by
  // a callback), what is queued runs here, now, and the thread ends when its task returns.
  void close() noexcept;
  // The order counts as busy until the value returned is dropped.
  busy hold() const;
  // Waits, in the process, until every order that has run a call is idle: nothing queued,
  // running or held. Gives up on an order, saying so, where no call of it ended within its
  // patience. Call without the GIL.
  static void settle_all() noexcept;

 private:
  static void loop(const std::shared_ptr<state>& s);

  std::shared_ptr<state> state_;
  std::thread thread_;
  std::once_flag started_;
};

}  // namespace distcomm::torch_binding
