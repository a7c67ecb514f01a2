// Non-blocking collectives (iallreduce, ireduce_scatter, iallgather, ibroadcast, ibarrier): many
// in flight at once give the results of the blocking calls, complete in the order they were
// started, mix with blocking calls in that order, and carry their error to wait().
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "context.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace backend_suite {

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
  std::vector<int> order;  // the order the works completed in, from their then() callbacks
  std::mutex order_mutex;
  const auto track = [&](dc::work w) {
    const int index = static_cast<int>(works.size());
    w.then([&, index](std::exception_ptr) {
      std::lock_guard<std::mutex> lock(order_mutex);
      order.push_back(index);
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
  {
    std::lock_guard<std::mutex> lock(order_mutex);
    std::vector<int> posted(works.size());
    for (std::size_t i = 0; i < posted.size(); ++i) posted[i] = static_cast<int>(i);
    CHECK(order == posted);
  }

  // A mismatch reaches wait() on every rank, and leaves the communicator usable.
  std::vector<float> v(me == 0 ? 4 : 5, 1.0f);
  dc::work bad = comm.iallreduce(dc::view(v));
  CHECK_THROWS_AS(bad.wait(), dc::mismatch_error);
  CHECK(bad.test());
  CHECK(bad.error() != nullptr);

  // A then() callback that waits on its own communicator is refused instead of waiting for
  // itself; an ibarrier after it still pairs up.
  // (A callback attached after completion runs at once on this thread, where a blocking call
  // would be legal, and is skipped: it must not start a collective the other ranks do not.)
  std::atomic<bool> refused{false};
  std::atomic<bool> on_progress_thread{false};
  const auto caller = std::this_thread::get_id();
  std::vector<float> one(1, 1.0f);
  dc::work w = comm.iallreduce(dc::view(one));
  w.then([&](std::exception_ptr) {
    if (std::this_thread::get_id() == caller) return;
    on_progress_thread = true;
    try {
      comm.barrier();
    } catch (const dc::invalid_argument_error&) {
      refused = true;
    }
  });
  w.wait();
  comm.ibarrier().wait();
  comm.synchronize();
  CHECK(refused.load() == on_progress_thread.load());
  CHECK(one[0] == static_cast<float>(p));
  ctl.barrier();
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("non-blocking collectives: in flight together, in order, errors on wait",
                          E, backend_suite_async) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::nonblocking_collectives(ctx); });
}
