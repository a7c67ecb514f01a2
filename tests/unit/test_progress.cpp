// detail::progress (async/progress.hpp): one collective at a time, whether it runs on the caller's
// thread (a blocking call, claimed without the lock until a call is queued) or on the progress
// thread; in order; and drain() returns once everything started has run.
#include <doctest/doctest.h>

#include <atomic>
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
