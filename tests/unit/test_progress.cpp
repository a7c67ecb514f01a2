// detail::progress (async/progress.hpp): one collective at a time, whether it runs on the caller's
// thread (a blocking call, claimed without the lock until a call is queued) or on the progress
// thread; in order; drain() returns once everything started has run; then() callbacks may wait on
// calls of their own progress, or destroy it; and the pool under it.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "distcomm/async/progress.hpp"

namespace dd = distcomm::detail;

namespace {

// A body that fails the test if another body runs at the same time.
struct exclusive {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> ran{0};
  void operator()() {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    for (volatile int spin = 0; spin < 200; spin = spin + 1) {
    }
    inside.fetch_sub(1);
    ran.fetch_add(1);
  }
};

// `blocking` threads make `calls` blocking calls each; with `queued`, one more thread queues
// `calls` calls (the progress thread starts with the first) and waits for them. Every call must
// run, none beside another.
void run_from_threads(int blocking, bool queued, int calls) {
  dd::progress p;
  exclusive body;
  std::vector<std::thread> ts;
  if (queued) {
    ts.emplace_back([&] {
      std::vector<distcomm::work> ws;
      for (int i = 0; i < calls; ++i) ws.push_back(p.post([&] { body(); }));
      for (auto& w : ws) w.wait();
    });
  }
  for (int t = 0; t < blocking; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < calls; ++i) p.run("allreduce", [&] { body(); });
    });
  }
  for (auto& t : ts) t.join();
  p.drain();
  CHECK(body.overlaps.load() == 0);
  CHECK(body.ran.load() == (blocking + (queued ? 1 : 0)) * calls);
}

}  // namespace

TEST_CASE("progress: blocking calls from several threads run one at a time, without a thread") {
  run_from_threads(4, false, 2000);
}

TEST_CASE("progress: blocking calls and queued ones, from several threads, one at a time") {
  run_from_threads(2, true, 1000);
}

TEST_CASE("progress: drain() returns once a blocking call on another thread has run") {
  dd::progress p;
  std::atomic<bool> started{false};
  std::atomic<bool> finished{false};
  std::thread caller([&] {
    p.run("allreduce", [&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished = true;
    });
  });
  while (!started) std::this_thread::yield();
  p.drain();  // must wait for the call, and must be woken by its end
  CHECK(finished.load());
  caller.join();
}

TEST_CASE("progress: a blocking call's exception propagates and frees the communicator") {
  dd::progress p;
  CHECK_THROWS_AS(p.run("allreduce", [] { throw distcomm::timeout_error("late"); }),
                  distcomm::timeout_error);
  int ran = 0;
  p.run("allreduce", [&] { ++ran; });
  p.post([&] { ++ran; }).wait();
  p.run("allreduce", [&] { ++ran; });
  CHECK(ran == 3);
}

TEST_CASE("progress: then() callbacks start calls and wait on them, three deep, in flight too") {
  dd::progress p;
  exclusive body;
  std::atomic<int> depth_reached{0};
  // Each level's callback posts the next level and waits for it: with callbacks on the thread
  // that runs the queue, the first wait would wait for itself.
  std::function<void(int)> level = [&](int d) {
    if (d == 3) return;
    distcomm::work w = p.post([&] { body(); });
    w.then([&, d](std::exception_ptr) {
      depth_reached = std::max(depth_reached.load(), d + 1);
      level(d + 1);
      p.run("allreduce", [&] { body(); });  // blocking, from the callback
    });
    w.wait();
  };
  // A call left in flight a while, polled by whichever thread has the role.
  std::atomic<int> polls{0};
  distcomm::work in_flight =
      p.post_in_flight([&]() -> dd::poll_fn { return [&] { return polls.fetch_add(1) >= 20; }; });
  std::thread caller([&] { level(0); });
  caller.join();
  in_flight.wait();
  p.drain();
  CHECK(depth_reached.load() == 3);
  CHECK(body.overlaps.load() == 0);
}

TEST_CASE("progress: a then() callback may destroy the progress it runs on") {
  auto p = std::make_unique<dd::progress>();
  std::atomic<bool> destroyed{false};
  int ran = 0;
  distcomm::work first = p->post([&] { ++ran; });
  distcomm::work second = p->post([&] { ++ran; });  // queued behind: run before it goes
  first.then([&](std::exception_ptr) {
    p.reset();
    destroyed = true;
  });
  while (!destroyed) std::this_thread::yield();
  CHECK(second.test());
  CHECK(ran == 2);
}

TEST_CASE("pool: a task that blocks never holds up the next; stop() from a task lets it go") {
  auto pool = std::make_unique<dd::pool>();
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  pool->run([&] {
    while (!release) std::this_thread::yield();  // blocked until the second task has run
    ++ran;
  });
  pool->run([&] {
    ++ran;
    release = true;
  });
  while (ran.load() < 2) std::this_thread::yield();
  std::atomic<bool> stopped{false};
  pool->run([&] {
    pool.reset();  // joins the others, lets this thread go
    stopped = true;
  });
  while (!stopped) std::this_thread::yield();
  CHECK(ran.load() == 2);
}
