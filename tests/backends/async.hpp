// Non-blocking collectives (iallreduce, ireduce_scatter, iallgather, ibroadcast, ibarrier): many
// in flight at once give the results of the blocking calls, complete in the order they were
// started, mix with blocking calls in that order, and carry their error to wait().
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "context.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace backend_suite {

// Waits until `done()` (a callback on another thread has run) or 30 s.
template <class F>
void wait_for_flag(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

template <class B>
void nonblocking_collectives(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::communicator<B, dc::strategy::automatic> comm(ctx.make(), suite_config<B>());
  const int p = ctx.size;
  const int me = ctx.rank;
  const auto pp = static_cast<std::size_t>(p);
  const dc::dtype t = dc::dtype::f32;
  const auto sum = dc::reduce_op::sum;

  // Sizes across the automatic table's ranges (tree, ps, ring, native), several of each kind.
  const std::size_t counts[] = {1, 13, 64, 301, 700, 1500};
  std::vector<std::vector<unsigned char>> inplace, in, out, rs_in, rs_out, ag_in, ag_out, bc;
  std::vector<dc::work> works;
  // Whether every work started before one had completed when its then() callback ran (the
  // callbacks themselves may run side by side, on different threads).
  std::atomic<int> callbacks_run{0};
  std::atomic<int> out_of_order{0};
  const auto track = [&](dc::work w) {
    w.then([&, earlier = works](std::exception_ptr) {
      for (const auto& e : earlier) out_of_order += e.test() ? 0 : 1;
      ++callbacks_run;
    });
    works.push_back(std::move(w));
  };
  for (std::size_t c : counts) {
    inplace.push_back(exact_buffer(me, 0, c, t, sum, p));
    track(comm.iallreduce(dc::tensor_view{inplace.back().data(), c, t}, sum));
    in.push_back(exact_buffer(me, 0, c, t, dc::reduce_op::max, p));
    out.emplace_back(c * 4 + 1, 0xab);
    track(comm.iallreduce(dc::tensor_view{in.back().data(), c, t},
                          dc::tensor_view{out.back().data(), c, t}, dc::reduce_op::max));
    rs_in.push_back(exact_buffer(me, 0, c * pp, t, sum, p));
    rs_out.emplace_back(c * 4 + 1, 0xab);
    track(comm.ireduce_scatter(dc::tensor_view{rs_in.back().data(), c * pp, t},
                               dc::tensor_view{rs_out.back().data(), c, t}, sum));
    ag_in.push_back(exact_buffer(me, 0, c, t, sum, p));
    ag_out.emplace_back(c * 4 * pp + 1, 0xab);
    track(comm.iallgather(dc::tensor_view{ag_in.back().data(), c, t},
                          dc::tensor_view{ag_out.back().data(), c * pp, t}));
    const int root = static_cast<int>(c % pp);
    bc.push_back(exact_buffer(me == root ? 7 : me, 0, c, t, sum, p));
    track(comm.ibroadcast(dc::tensor_view{bc.back().data(), c, t}, root));
  }
  track(comm.ibarrier());
  // A grouped allreduce whose list is gone before it runs (the views are copied).
  std::vector<std::vector<unsigned char>> group;
  for (std::size_t c : counts) group.push_back(exact_buffer(me, 0, c, t, sum, p));
  {
    std::vector<dc::tensor_view> views;
    for (std::size_t i = 0; i < group.size(); ++i) views.push_back({group[i].data(), counts[i], t});
    track(comm.iallreduce(dc::span<const dc::tensor_view>(views), sum));
  }
  // A blocking call waits its turn behind them.
  auto last = exact_buffer(me, 0, 33, t, sum, p);
  comm.allreduce(dc::tensor_view{last.data(), 33, t}, sum);
  for (auto& w : works) CHECK(w.test());  // the blocking call ran after every one of them
  for (auto& w : works) w.wait();

  std::string first;
  CHECK_MESSAGE(count_wrong(last.data(), 0, 33, t, sum, p, &first) == 0, first);
  for (std::size_t k = 0; k < std::size(counts); ++k) {
    const std::size_t c = counts[k];
    CAPTURE(c);
    CHECK_MESSAGE(count_wrong(inplace[k].data(), 0, c, t, sum, p, &first) == 0, first);
    CHECK_MESSAGE(count_wrong(out[k].data(), 0, c, t, dc::reduce_op::max, p, &first) == 0, first);
    CHECK_MESSAGE(
        count_wrong(rs_out[k].data(), static_cast<std::size_t>(me) * c, c, t, sum, p, &first) == 0,
        first);
    for (int q = 0; q < p; ++q) {
      const auto theirs = exact_buffer(q, 0, c, t, sum, p);
      CHECK(std::memcmp(ag_out[k].data() + static_cast<std::size_t>(q) * c * 4, theirs.data(),
                        c * 4) == 0);
    }
    const auto root_data = exact_buffer(7, 0, c, t, sum, p);
    CHECK(std::memcmp(bc[k].data(), root_data.data(), c * 4) == 0);
    CHECK_MESSAGE(count_wrong(group[k].data(), 0, c, t, sum, p, &first) == 0, first);
  }
  wait_for_flag([&] { return callbacks_run.load() == static_cast<int>(works.size()); });
  CHECK(callbacks_run.load() == static_cast<int>(works.size()));
  CHECK(out_of_order.load() == 0);

  // A mismatch reaches wait() on every rank, and leaves the communicator usable.
  std::vector<float> v(me == 0 ? 4 : 5, 1.0f);
  dc::work bad = comm.iallreduce(dc::view(v));
  CHECK_THROWS_AS(bad.wait(), dc::mismatch_error);
  CHECK(bad.test());
  CHECK(bad.error() != nullptr);

  // then() callbacks may call collectives of their own communicator, blocking or not, and wait
  // on them, two deep (PyTorch's PowerSGD hook does): the progress thread's role goes on on
  // another thread meanwhile. Every rank's callbacks make the same calls, wherever they run (at
  // once on the calling thread when the work had completed already).
  std::vector<float> one(1, 1.0f), two(1, 1.0f), three(1, 1.0f), four(1, 1.0f);
  std::atomic<int> nested_failures{0};
  std::atomic<int> nested_done{0};
  dc::work w = comm.iallreduce(dc::view(one));
  w.then([&](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
      comm.allreduce(dc::view(two));
      dc::work inner = comm.iallreduce(dc::view(three));
      inner.then([&](std::exception_ptr ie) {
        try {
          if (ie) std::rethrow_exception(ie);
          comm.iallreduce(dc::view(four)).wait();
        } catch (...) {
          ++nested_failures;
        }
        ++nested_done;
      });
      inner.wait();
    } catch (...) {
      ++nested_failures;
    }
    ++nested_done;
  });
  w.wait();
  wait_for_flag([&] { return nested_done.load() == 2; });
  comm.ibarrier().wait();
  comm.synchronize();
  CHECK(nested_done.load() == 2);
  CHECK(nested_failures.load() == 0);
  for (const auto* v : {&one, &two, &three, &four}) CHECK((*v)[0] == static_cast<float>(p));

  // A then() callback may destroy its communicator (drop the last reference to it): the
  // destruction runs what is queued and lets the callback's own thread go.
  using comm_type = dc::communicator<B, dc::strategy::automatic>;
  auto owned = std::make_unique<comm_type>(ctx.make(), suite_config<B>());
  std::vector<float> x(1000, 1.0f), y(1000, 1.0f);
  std::atomic<bool> destroyed{false};
  dc::work early = owned->iallreduce(dc::view(x));
  dc::work second = owned->iallreduce(dc::view(y));  // queued behind it
  early.then([&](std::exception_ptr) {
    owned.reset();
    destroyed = true;
  });
  wait_for_flag([&] { return destroyed.load(); });
  CHECK(destroyed.load());
  CHECK(second.test());
  CHECK_NOTHROW(second.wait());
  CHECK(x[0] == static_cast<float>(p));
  CHECK(y[999] == static_cast<float>(p));
  ctl.barrier();
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("non-blocking collectives: in flight together, in order, errors on wait",
                          E, backend_suite_async) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::nonblocking_collectives(ctx); });
}
