// Sub-communicators: split into odd and even ranks (keys reversing the order), a subset, nested
// splits four levels deep (the levels above dropped first, siblings at once), split_by_node,
// ranks that join no group; collectives in flight on a parent and two children at once; a child
// that fails (a departed rank) leaves its parent working; deterministic mode in a child; subset
// lists that differ across ranks are a mismatch_error on every rank.
#pragma once

#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "collectives.hpp"
#include "distcomm/any_communicator.hpp"

namespace backend_suite {

// Sum over the ranks r of the parent (0 .. p-1) that `in(r)` selects, of r + 1.
template <class F>
double sum_of_ranks(int p, F in) {
  double s = 0;
  for (int r = 0; r < p; ++r) {
    if (in(r)) s += r + 1;
  }
  return s;
}

template <class B>
void groups(rank_context<B>& ctx) {
  const int p = ctx.size;
  const int me = ctx.rank;
  dc::communicator<B> comm(ctx.make(), suite_config<B>());

  // Odd and even ranks, keys reversing the order: the highest rank of each parity is rank 0.
  std::optional<dc::communicator<B>> parity = comm.split(me % 2, -me);
  REQUIRE(parity);
  const int same = (p - me % 2 + 1) / 2;  // ranks of this parity
  CHECK(parity->size() == same);
  int above = 0;
  for (int r = me + 2; r < p; r += 2) ++above;
  CHECK(parity->rank() == above);

  // Every rank, in reverse order.
  std::vector<int> reversed(static_cast<std::size_t>(p));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  std::optional<dc::communicator<B>> back =
      comm.subset(dc::span<const int>(reversed.data(), reversed.size()));
  REQUIRE(back);
  CHECK(back->rank() == p - 1 - me);

  // One collective in flight on the parent and on both children at once.
  for (int round = 0; round < 3; ++round) {
    std::vector<double> a(301, me + 1.0), b(301, me + 1.0), c(301, me + 1.0);
    dc::work wa = comm.iallreduce(dc::view(a.data(), a.size()));
    dc::work wb = parity->iallreduce(dc::view(b.data(), b.size()));
    dc::work wc = back->iallreduce(dc::view(c.data(), c.size()));
    wc.wait();
    wb.wait();
    wa.wait();
    const double all = sum_of_ranks(p, [](int) { return true; });
    CHECK(a[300] == all);
    CHECK(b[0] == sum_of_ranks(p, [&](int r) { return r % 2 == me % 2; }));
    CHECK(c[150] == all);
  }

  // Nested: the parity group split again into its first rank and the rest.
  {
    std::optional<dc::communicator<B>> inner = parity->split(parity->rank() == 0 ? 0 : 1);
    REQUIRE(inner);
    double x = me + 1.0;
    inner->allreduce(dc::view(&x, 1));
    if (parity->rank() == 0) {
      CHECK(x == me + 1.0);
    } else {
      CHECK(x == sum_of_ranks(p, [&](int r) { return r % 2 == me % 2; }) -
                     (same > 0 ? (me % 2 + 2 * (same - 1)) + 1.0 : 0.0));
    }
  }

  // Groups of groups, four levels, with two or more members wherever the job has them: every
  // level owns what it needs, so the levels above it may go first, and siblings run collectives
  // at the same time.
  {
    std::optional<dc::communicator<B>> l1 = comm.split(0, me);  // every rank
    REQUIRE(l1);
    std::optional<dc::communicator<B>> l2 = l1->split(0, -me);  // every rank, reversed
    REQUIRE(l2);
    CHECK(l2->rank() == p - 1 - me);
    std::optional<dc::communicator<B>> l3 = l2->split(me % 2, me);  // by parity
    std::optional<dc::communicator<B>> sibling = l2->split(me < 2 ? 0 : 1, me);
    REQUIRE(l3);
    REQUIRE(sibling);
    l2.reset();
    l1.reset();
    const double parity_sum = sum_of_ranks(p, [&](int r) { return r % 2 == me % 2; });
    const double sibling_sum = sum_of_ranks(p, [&](int r) { return (r < 2) == (me < 2); });
    for (int round = 0; round < 3; ++round) {
      std::vector<double> x(3000, me + 1.0), y(3000, me + 1.0);
      dc::work wx = l3->iallreduce(dc::view(x.data(), x.size()));
      dc::work wy = sibling->iallreduce(dc::view(y.data(), y.size()));
      wy.wait();
      wx.wait();
      CHECK(x[2999] == parity_sum);
      CHECK(y[0] == sibling_sum);
    }
    std::optional<dc::communicator<B>> l4 = sibling->split(0, -me);
    REQUIRE(l4);
    double z = me + 1.0;
    l4->allreduce(dc::view(&z, 1));
    CHECK(z == sibling_sum);
    const int first = 0;
    std::optional<dc::communicator<B>> l4_subset = l4->subset(dc::span<const int>(&first, 1));
    CHECK(l4_subset.has_value() == (l4->rank() == 0));
  }

  // On one host every rank shares the node.
  {
    dc::communicator<B> node = comm.split_by_node();
    CHECK(node.size() == p);
    CHECK(node.rank() == me);
  }

  // Rank 0 joins no group; a subset without this rank gives nothing.
  {
    std::optional<dc::communicator<B>> rest = comm.split(me == 0 ? -1 : 7);
    CHECK(rest.has_value() == (me != 0));
    if (rest) {
      CHECK(rest->size() == p - 1);
      double x = 1.0;
      rest->allreduce(dc::view(&x, 1));
      CHECK(x == p - 1.0);
    }
    const int last = p - 1;
    std::optional<dc::communicator<B>> one = comm.subset(dc::span<const int>(&last, 1));
    CHECK(one.has_value() == (me == last));
    if (one) CHECK(one->size() == 1);
  }

  // Lists that differ across ranks: a mismatch_error on every rank; the parent goes on.
  {
    std::vector<int> mine = {0, 1};
    if (me == 0) mine = {1, 0};
    CHECK_THROWS_AS(comm.subset(dc::span<const int>(mine.data(), mine.size())), dc::mismatch_error);
    const int twice[2] = {0, 0};
    CHECK_THROWS_AS(comm.subset(dc::span<const int>(twice, 2)), dc::invalid_argument_error);
  }

  // A child whose rank 0 leaves: the others' next collective on it fails at once (on backends
  // that announce departures; MPI's ranks would wait for their deadline); the parent works.
  if constexpr (dc::detail::unreceived_messages_ok<B>::value) {
    std::optional<dc::communicator<B>> child = comm.split(0);
    REQUIRE(child);
    float y = 1.0f;
    child->allreduce(dc::view(&y, 1));
    CHECK(y == static_cast<float>(p));
    if (me != 0) {
      CHECK_THROWS_AS(child->barrier(), dc::error);
    }
    child.reset();  // (ucx's teardown is a store barrier of the child's ranks)
    double z = 1.0;
    comm.allreduce(dc::view(&z, 1));
    CHECK(z == p);
  }

  // Deterministic mode carries over: a child's reduction is its ranks' rank-order fold.
  {
    dc::config cfg = suite_config<B>();
    cfg.deterministic = true;
    dc::communicator<B, dc::strategy::ring> det(ctx.make(), cfg);
    std::optional<dc::communicator<B, dc::strategy::ring>> child = det.split(me % 2, me);
    REQUIRE(child);
    const std::size_t count = 301;
    auto buf = random_buffer(child->rank(), 0, count, dc::dtype::f32);
    child->allreduce(dc::tensor_view{buf.data(), count, dc::dtype::f32});
    CHECK(buf == rank_order_fold(0, count, child->size(), dc::dtype::f32, dc::reduce_op::sum));
  }

  // Through any_communicator.
  {
    dc::any_communicator any(dc::communicator<B>(ctx.make(), suite_config<B>()));
    std::optional<dc::any_communicator> half = any.split(me % 2);
    REQUIRE(half);
    CHECK(half->size() == same);
    double x = me + 1.0;
    half->allreduce(dc::view(&x, 1));
    CHECK(x == sum_of_ranks(p, [&](int r) { return r % 2 == me % 2; }));
  }
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("split, subset, split_by_node: groups beside their parent", E,
                          backend_suite_groups) {
  using B = typename E::backend;
  if constexpr (distcomm::detail::has_split<B>::value) {
    E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::groups(ctx); });
  } else {
    MESSAGE("skipped: this backend has no split()");
  }
}
