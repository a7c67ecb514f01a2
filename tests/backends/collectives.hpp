// The other collectives through the communicator (reduce_scatter, allgather, broadcast from every
// root, barrier) on the point-to-point strategies and on the backend's native ones, and
// deterministic mode: every strategy and fusion threshold gives the bits of the rank-order fold.
#pragma once

#include <thread>

#include "allreduce.hpp"

namespace backend_suite {

constexpr dc::tag_t tag_barrier_ready = 141;

// Every rank but 0 starts its clock, then tells rank 0, which waits `delay` more before entering
// the barrier: no rank may leave the barrier before `delay` has passed on its own clock. (A lower
// bound only, implied by causality: no timing target.)
template <class B, class Comm>
void check_barrier(Comm& comm, control<B>& ctl, int me, int p) {
  const auto delay = std::chrono::milliseconds(50);
  auto& side = ctl.comm().backend();
  unsigned char token = 1;
  if (me == 0) {
    for (int q = 1; q < p; ++q) side.irecv(&token, 1, q, tag_barrier_ready).wait(soon());
    std::this_thread::sleep_for(delay);
    comm.barrier();
  } else {
    const auto t0 = dc::clock::now();
    side.isend(&token, 1, 0, tag_barrier_ready).wait(soon());
    comm.barrier();
    CHECK(dc::clock::now() - t0 >= delay);
  }
}

template <class B, class S>
void other_collectives(rank_context<B>& ctx, const dc::config& cfg, const char* label) {
  control<B> ctl(ctx);
  dc::communicator<B, S> comm(ctx.make(), cfg);
  const int p = ctx.size;
  const int me = ctx.rank;
  const auto pp = static_cast<std::size_t>(p);
  const auto sum = dc::reduce_op::sum;
  CAPTURE(label);
  // Counts per rank: 0, 1, and 301 (above the 256-byte segment in every dtype). Every op at 301
  // elements; the small counts with sum (the kernels themselves are covered by the allreduces).
  for (std::size_t d = 0; d < std::size(dc::all_dtypes); ++d) {
    const dc::dtype t = dc::all_dtypes[d];
    const std::size_t es = dc::dtype_size(t);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{301}}) {
      CAPTURE(dc::to_string(t));
      CAPTURE(count);
      for (dc::reduce_op op : dc::all_reduce_ops) {
        if (count != 301 && op != sum) continue;
        // Block r of the reduction is elements [r * count, (r + 1) * count) of exact_expected.
        auto in = exact_buffer(me, 0, count * pp, t, op, p);
        std::vector<unsigned char> out(count * es + 1, 0xab);
        comm.reduce_scatter(dc::tensor_view{in.data(), count * pp, t},
                            dc::tensor_view{out.data(), count, t}, op);
        std::string first;
        const std::size_t wrong =
            count_wrong(out.data(), static_cast<std::size_t>(me) * count, count, t, op, p, &first);
        CHECK_MESSAGE(wrong == 0, "reduce_scatter " << dc::to_string(op) << ": " << wrong
                                                    << " wrong, " << first);
        CHECK_MESSAGE(out[count * es] == 0xab, "reduce_scatter wrote past the end");
      }
      {
        auto mine = exact_buffer(me, 0, count, t, sum, p);
        std::vector<unsigned char> all(count * es * pp + 1, 0xab);
        comm.allgather(dc::tensor_view{mine.data(), count, t},
                       dc::tensor_view{all.data(), count * pp, t});
        for (int q = 0; q < p; ++q) {
          const auto theirs = exact_buffer(q, 0, count, t, sum, p);
          CHECK_MESSAGE(std::memcmp(all.data() + static_cast<std::size_t>(q) * count * es,
                                    theirs.data(), count * es) == 0,
                        "allgather block " << q);
        }
        CHECK_MESSAGE(all.back() == 0xab, "allgather wrote past the end");
      }
      // The root turns with the dtype: over the 8 dtypes every rank of up to 8 is a root.
      const int root = static_cast<int>((d + count) % pp);
      auto buf = exact_buffer(me, 0, count, t, sum, p);
      comm.broadcast(dc::tensor_view{buf.data(), count, t}, root);
      CHECK_MESSAGE(buf == exact_buffer(root, 0, count, t, sum, p), "broadcast from " << root);
    }
  }
  check_barrier(comm, ctl, me, p);
}

// ---- deterministic mode ---------------------------------------------------------------------

constexpr dc::dtype float_dtypes[] = {dc::dtype::f16, dc::dtype::bf16, dc::dtype::f32,
                                      dc::dtype::f64};

// x0 op x1 op ... op x(p-1) of random_input in rank order, rounded to t after every step (f16
// and bf16 add in float, then round, as the kernels do), avg divided once at the end.
inline std::vector<unsigned char> rank_order_fold(std::size_t first, std::size_t count, int p,
                                                  dc::dtype t, dc::reduce_op op) {
  std::vector<unsigned char> v(count * dc::dtype_size(t) + 1, 0x5a);
  const auto round = [&](double x) {
    unsigned char tmp[8];
    put(tmp, 0, t, x);
    return get(tmp, 0, t);
  };
  const auto add = [&](double a, double b) {
    return t == dc::dtype::f64 ? a + b
                               : static_cast<double>(static_cast<float>(a) + static_cast<float>(b));
  };
  for (std::size_t i = 0; i < count; ++i) {
    double acc = random_input(0, first + i, t);
    for (int r = 1; r < p; ++r) acc = round(add(acc, random_input(r, first + i, t)));
    if (op == dc::reduce_op::avg) {
      acc = t == dc::dtype::f64
                ? acc / p
                : round(static_cast<double>(static_cast<float>(acc) / static_cast<float>(p)));
    }
    put(v.data(), i, t, acc);
  }
  return v;
}

inline std::vector<unsigned char> random_buffer(int rank, std::size_t first, std::size_t count,
                                                dc::dtype t) {
  std::vector<unsigned char> v(count * dc::dtype_size(t) + 1, 0x5a);
  for (std::size_t i = 0; i < count; ++i) put(v.data(), i, t, random_input(rank, first + i, t));
  return v;
}

// Allreduce of random floats (sum and avg, counts p+1 and 301) with strategy S in deterministic
// mode: bitwise the rank-order fold.
template <class B, class S>
void deterministic_allreduce(rank_context<B>& ctx, const dc::config& cfg, const char* label,
                             std::uint64_t& h) {
  dc::communicator<B, S> comm(ctx.make(), cfg);
  const int p = ctx.size;
  for (dc::dtype t : float_dtypes) {
    for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
      for (std::size_t count : {static_cast<std::size_t>(p + 1), std::size_t{301}}) {
        auto buf = random_buffer(ctx.rank, 0, count, t);
        comm.allreduce(dc::tensor_view{buf.data(), count, t}, op);
        CHECK_MESSAGE(buf == rank_order_fold(0, count, p, t, op),
                      label << " " << dc::to_string(t) << " " << dc::to_string(op) << " count "
                            << count << ": not the bits of the rank-order fold");
        h = fnv(h, buf.data(), buf.size());
      }
    }
  }
}

template <class B>
void deterministic_mode(rank_context<B>& ctx) {
  namespace strategy = dc::strategy;
  control<B> ctl(ctx);
  dc::config cfg = suite_config<B>();
  cfg.deterministic = true;
  const int p = ctx.size;
  std::uint64_t h = fnv_basis;
  deterministic_allreduce<B, strategy::ring>(ctx, cfg, "ring", h);
  deterministic_allreduce<B, strategy::tree>(ctx, cfg, "tree", h);
  deterministic_allreduce<B, strategy::recursive_doubling>(ctx, cfg, "recursive_doubling", h);
  for (int servers : {1, 0}) {
    dc::config ps = cfg;
    ps.ps_servers = servers;
    deterministic_allreduce<B, strategy::parameter_server>(
        ctx, ps, servers == 1 ? "parameter_server k=1" : "parameter_server k=all", h);
  }
  deterministic_allreduce<B, strategy::automatic>(ctx, cfg, "automatic", h);
  if constexpr (dc::has_native_allreduce_v<B>) {
    if constexpr (dc::detail::native_is_deterministic<B>::value) {
      deterministic_allreduce<B, strategy::native>(ctx, cfg, "native", h);
    } else {
      // This native reduction is not a rank-order fold: refused before any byte moves.
      dc::communicator<B, strategy::native> comm(ctx.make(), cfg);
      float x = 1.0f;
      CHECK_THROWS_AS(comm.allreduce(dc::view(&x, 1)), dc::invalid_argument_error);
    }
  }
  {  // The ordered reduce-scatter, and the grouped call at every fusion threshold.
    dc::communicator<B, strategy::ring> comm(ctx.make(), cfg);
    const std::size_t count = 301;
    for (dc::dtype t : float_dtypes) {
      auto in = random_buffer(ctx.rank, 0, count * static_cast<std::size_t>(p), t);
      std::vector<unsigned char> out(count * dc::dtype_size(t) + 1, 0x5a);
      comm.reduce_scatter(dc::tensor_view{in.data(), count * static_cast<std::size_t>(p), t},
                          dc::tensor_view{out.data(), count, t});
      CHECK_MESSAGE(out == rank_order_fold(static_cast<std::size_t>(ctx.rank) * count, count, p, t,
                                           dc::reduce_op::sum),
                    "reduce_scatter " << dc::to_string(t) << ": not the rank-order fold");
    }
  }
  for (std::size_t threshold : {dc::config{}.fusion_threshold, std::size_t{256}, std::size_t{0}}) {
    dc::config fused = cfg;
    fused.fusion_threshold = threshold;
    dc::communicator<B, strategy::automatic> comm(ctx.make(), fused);
    std::vector<std::vector<unsigned char>> data;
    std::vector<dc::tensor_view> views;
    for (std::size_t k = 0; k < std::size(grouped_specs); ++k) {
      const dc::dtype t = float_dtypes[k % 4];
      data.push_back(random_buffer(ctx.rank, k * 10000, grouped_specs[k].count, t));
    }
    for (std::size_t k = 0; k < data.size(); ++k) {
      views.push_back(dc::tensor_view{data[k].data(), grouped_specs[k].count, float_dtypes[k % 4]});
    }
    comm.allreduce(views, dc::reduce_op::avg);
    for (std::size_t k = 0; k < data.size(); ++k) {
      CHECK_MESSAGE(
          data[k] == rank_order_fold(k * 10000, grouped_specs[k].count, p, float_dtypes[k % 4],
                                     dc::reduce_op::avg),
          "grouped, threshold " << threshold << ", tensor " << k << ": not the rank-order fold");
    }
  }
  CHECK_MESSAGE(ctl.same_on_every_rank(h), "deterministic results differ between ranks");
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("reduce_scatter, allgather, broadcast from every root, barrier", E,
                          backend_suite_collectives) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::other_collectives<B, distcomm::strategy::ring>(
        ctx, backend_suite::suite_config<B>(), "point-to-point");
    // The native strategy uses what the backend has and point-to-point for the rest.
    if constexpr (distcomm::has_native_allreduce_v<B>) {
      backend_suite::other_collectives<B, distcomm::strategy::native>(
          ctx, backend_suite::suite_config<B>(), "native");
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("deterministic mode: every strategy and fusion threshold, same bits", E,
                          backend_suite_deterministic) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::deterministic_mode(ctx); });
}
