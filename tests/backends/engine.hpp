// distcomm::engine on every backend: tensors submitted in a different random order on every rank
// give the synchronous grouped allreduce's bits (deterministic mode) over 1,000 steps; ranks with
// fewer steps join() while the others go on; and each way of submitting different tensors on
// different ranks is a mismatch_error on every rank, naming the tensor (not a hang, not a timeout);
// works' callbacks may submit and wait, or destroy the engine.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "context.hpp"
#include "distcomm/any_communicator.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/strategy/automatic.hpp"

namespace backend_suite {

#define ENGINE_CHECK_HAS(text, part)                               \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

template <class B>
dc::any_communicator engine_comm(rank_context<B>& ctx, dc::config cfg) {
  return dc::any_communicator(dc::communicator<B, dc::strategy::automatic>(ctx.make(), cfg));
}

// Steps of the random-order test: 1,000 unless BACKEND_SUITE_ENGINE_STEPS says fewer.
inline int engine_steps() {
  const char* v = std::getenv("BACKEND_SUITE_ENGINE_STEPS");
  return v != nullptr ? std::max(1, std::atoi(v)) : 1000;
}

template <class B>
void engine_random_orders(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::config cfg = suite_config<B>();
  cfg.deterministic = true;
  cfg.fusion_threshold = 4096;  // several fused collectives per cycle, split differently each time
  dc::any_communicator comm = engine_comm(ctx, cfg);
  dc::communicator<B, dc::strategy::automatic> reference(ctx.make(), cfg);
  dc::engine eng(comm);
  const int me = ctx.rank;
  const std::size_t sizes[] = {1, 7, 64, 300, 1000, 33, 5, 2048};
  constexpr std::size_t n = std::size(sizes);
  std::vector<std::vector<float>> mine(n), ref(n);
  std::mt19937 rng(static_cast<unsigned>(1234 + 7 * me));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  const int steps = engine_steps();
  int differing = 0;
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < n; ++i) {
      mine[i].resize(sizes[i]);
      for (std::size_t j = 0; j < sizes[i]; ++j) {
        mine[i][j] = static_cast<float>(
            random_input(me, static_cast<std::size_t>(step) * 4096 + i * 512 + j, dc::dtype::f32));
      }
      ref[i] = mine[i];
    }
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<dc::work> works;
    for (std::size_t i : order) {
      works.push_back(
          eng.allreduce_async("grad" + std::to_string(i), dc::view(mine[i]), dc::reduce_op::avg));
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    }
    for (auto& w : works) w.wait();
    std::vector<dc::tensor_view> views;
    for (auto& r : ref) views.push_back(dc::view(r));
    reference.allreduce(dc::span<const dc::tensor_view>(views), dc::reduce_op::avg);
    for (std::size_t i = 0; i < n; ++i) {
      if (std::memcmp(mine[i].data(), ref[i].data(), sizes[i] * sizeof(float)) != 0) ++differing;
    }
  }
  CHECK_MESSAGE(differing == 0, differing << " tensors differ from the synchronous result");
  const auto st = eng.stats();
  MESSAGE("engine over " << steps << " steps: " << st.cycles << " cycles, " << st.full_cycles
                         << " full exchanges, " << st.collectives << " collectives");
  CHECK(st.tensors == static_cast<std::uint64_t>(steps) * n);
  // After the first steps the cache answers: almost every cycle is one small allreduce.
  CHECK(st.full_cycles < st.cycles / 2 + 4);
  ctl.barrier();
}

// Ranks with fewer steps join; the others' averages divide by the ranks that contributed.
template <class B>
void engine_join(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::config cfg = suite_config<B>();
  dc::any_communicator comm = engine_comm(ctx, cfg);
  dc::engine eng(comm);
  const int me = ctx.rank;
  const int p = ctx.size;
  const auto steps_of = [](int r) { return 3 + 2 * r; };
  const int count = 50;
  int wrong = 0;
  for (int step = 0; step < steps_of(me); ++step) {
    int contributing = 0;
    for (int r = 0; r < p; ++r) contributing += step < steps_of(r) ? 1 : 0;
    const auto input = [&](int r, int j) {
      return static_cast<double>((r + 1) * contributing + j % 5);
    };
    std::vector<double> avg(count), sum(count), mx(count);
    for (int j = 0; j < count; ++j)
      avg[static_cast<std::size_t>(j)] = sum[static_cast<std::size_t>(j)] =
          mx[static_cast<std::size_t>(j)] = input(me, j);
    auto a = eng.allreduce_async("avg", dc::view(avg), dc::reduce_op::avg);
    auto s = eng.allreduce_async("sum", dc::view(sum), dc::reduce_op::sum);
    auto m = eng.allreduce_async("max", dc::view(mx), dc::reduce_op::max);
    eng.synchronize();
    for (int j = 0; j < count; ++j) {
      double want_sum = 0, want_max = -1e300;
      for (int r = 0; r < p; ++r) {
        if (step >= steps_of(r)) continue;
        want_sum += input(r, j);
        want_max = std::max(want_max, input(r, j));
      }
      const auto uj = static_cast<std::size_t>(j);
      if (sum[uj] != want_sum || mx[uj] != want_max || avg[uj] != want_sum / contributing) ++wrong;
    }
  }
  dc::work joined = eng.join();
  joined.wait();
  CHECK(wrong == 0);
  // Afterwards the engine is as before: every rank contributes again.
  std::vector<double> one(3, 1.0);
  eng.allreduce_async("after", dc::view(one), dc::reduce_op::sum).wait();
  CHECK(one[0] == static_cast<double>(p));
  ctl.barrier();
}

// How long the failing wait took, and the error it raised.
template <class F>
std::pair<double, std::string> engine_failure(F&& f, bool* was_mismatch) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string text = "<no exception>";
  *was_mismatch = false;
  try {
    f();
  } catch (const dc::mismatch_error& e) {
    *was_mismatch = true;
    text = e.what();
  } catch (const std::exception& e) {
    text = std::string("not a mismatch_error: ") + e.what();
  }
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), text};
}

template <class B>
void engine_mismatches(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::config cfg = suite_config<B>();  // DISTCOMM_TIMEOUT 30 s at most: a mismatch comes first
  dc::any_communicator comm = engine_comm(ctx, cfg);
  dc::engine eng(comm);
  const int me = ctx.rank;
  std::vector<float> a(8, 1.0f), b(8, 1.0f), extra(8, 1.0f);
  bool mismatch = false;

  // 1. A name that only rank 0 submits: rank 0 waits on it; the others finish the step and wait
  // on the next one, which rank 0 never starts.
  {
    const auto [secs, text] = engine_failure(
        [&] {
          (void)eng.allreduce_async("a", dc::view(a), dc::reduce_op::sum);
          (void)eng.allreduce_async("b", dc::view(b), dc::reduce_op::sum);
          if (me == 0) (void)eng.allreduce_async("only_on_rank_0", dc::view(extra));
          eng.synchronize();
          (void)eng.allreduce_async("a", dc::view(a), dc::reduce_op::sum);
          (void)eng.allreduce_async("b", dc::view(b), dc::reduce_op::sum);
          eng.synchronize();
        },
        &mismatch);
    CHECK(mismatch);
    ENGINE_CHECK_HAS(text, "'only_on_rank_0' was submitted by rank 0, never by rank");
    MESSAGE("a name on one rank only: mismatch_error after " << secs << " s");
    CHECK(secs < 10);
  }
  ctl.barrier();

  // 2. The same name with another count on rank 0.
  {
    std::vector<float> w(me == 0 ? 4 : 5, 1.0f);
    const auto [secs, text] = engine_failure(
        [&] { eng.allreduce_async("w", dc::view(w), dc::reduce_op::sum).wait(); }, &mismatch);
    CHECK(mismatch);
    ENGINE_CHECK_HAS(text, "tensor 'w' with different calls, count: 4 on rank 0; 5 on rank");
    MESSAGE("another count: mismatch_error after " << secs << " s");
    CHECK(secs < 10);
  }
  ctl.barrier();

  // 2b. A tensor the response cache holds changes size on rank 0: the ranks' cache bits no longer
  // match it, and the full exchange names it.
  {
    for (int step = 0; step < 3; ++step) {
      eng.allreduce_async("a", dc::view(a), dc::reduce_op::max).wait();  // cached, steady
    }
    std::vector<float> resized(me == 0 ? 6 : 8, 1.0f);
    const auto [secs, text] = engine_failure(
        [&] { eng.allreduce_async("a", dc::view(resized), dc::reduce_op::max).wait(); }, &mismatch);
    CHECK(mismatch);
    ENGINE_CHECK_HAS(text, "tensor 'a' with different calls, count: 6 on rank 0; 8 on rank");
    MESSAGE("a cached tensor resized: mismatch_error after " << secs << " s");
    CHECK(secs < 10);
  }
  ctl.barrier();

  // 3. The same name with another op on the last rank.
  {
    std::vector<float> w(6, 1.0f);
    const auto op = me == ctx.size - 1 ? dc::reduce_op::max : dc::reduce_op::sum;
    const auto [secs, text] =
        engine_failure([&] { eng.allreduce_async("v", dc::view(w), op).wait(); }, &mismatch);
    CHECK(mismatch);
    ENGINE_CHECK_HAS(
        text, "tensor 'v' with different calls, op: max on rank " + std::to_string(ctx.size - 1));
    CHECK(secs < 10);
  }
  ctl.barrier();

  // 4. After join(), rank 0 submits again: its work fails naming it; the others then join.
  {
    dc::work j = me == 0 ? eng.join() : dc::work();
    if (me == 0) {
      std::vector<float> late(3, 1.0f);
      const auto [secs, text] =
          engine_failure([&] { eng.allreduce_async("late", dc::view(late)).wait(); }, &mismatch);
      CHECK(mismatch);
      ENGINE_CHECK_HAS(text, "'late' was submitted by rank 0 after join()");
      CHECK(secs < 10);
    }
    ctl.barrier();
    if (me != 0) j = eng.join();
    j.wait();
  }
  // The engine still works after all of them.
  std::vector<float> ok(5, 1.0f);
  eng.allreduce_async("ok", dc::view(ok), dc::reduce_op::sum).wait();
  CHECK(ok[0] == static_cast<float>(ctx.size));
  ctl.barrier();
}

// A work's then() callback may submit tensors to its own engine and wait for them, and may
// destroy the engine: callbacks run on a pool of the engine's, never on its thread.
template <class B>
void engine_callbacks(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::any_communicator comm = engine_comm(ctx, suite_config<B>());
  auto eng = std::make_unique<dc::engine>(comm);
  const auto p = static_cast<float>(ctx.size);
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 1.0f);
  std::atomic<int> failures{0};
  std::atomic<int> done{0};
  const auto settle = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (done.load() < 1 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    done = 0;
  };
  eng->allreduce_async("a", dc::view(a), dc::reduce_op::sum).then([&](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
      eng->allreduce_async("b", dc::view(b), dc::reduce_op::sum).wait();
    } catch (...) {
      ++failures;
    }
    ++done;
  });
  settle();
  CHECK(failures.load() == 0);
  CHECK(a[0] == p);
  CHECK(b[63] == p);

  eng->allreduce_async("c", dc::view(c), dc::reduce_op::sum).then([&](std::exception_ptr) {
    eng.reset();
    ++done;
  });
  settle();
  CHECK(eng == nullptr);
  CHECK(c[0] == p);
  ctl.barrier();
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("engine: callbacks submit, wait and destroy the engine", E,
                          backend_suite_engine_callbacks) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::engine_callbacks(ctx); });
}

TEST_CASE_TEMPLATE_DEFINE("engine: random readiness orders give the synchronous bits", E,
                          backend_suite_engine_orders) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::engine_random_orders(ctx); });
}

TEST_CASE_TEMPLATE_DEFINE("engine: uneven steps with join()", E, backend_suite_engine_join) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::engine_join(ctx); });
}

TEST_CASE_TEMPLATE_DEFINE("engine: mismatched submissions are named on every rank", E,
                          backend_suite_engine_mismatch) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::engine_mismatches(ctx); });
}
