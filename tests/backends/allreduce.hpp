// Allreduce on the backend under test: every strategy x dtype x op x edge-case count, in place and
// out of place, against exact values and bitwise equal on every rank; the grouped (fused) call
// with packing split and disabled; the backend's native allreduce against the ring on random
// floats.
#pragma once

#include <cmath>

#include "context.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/parameter_server.hpp"
#include "distcomm/strategy/recursive_doubling.hpp"
#include "distcomm/strategy/tree.hpp"

namespace backend_suite {

// 0; 1; 7; p-1 and p+1 (some ranks own an empty or a one-element chunk); an odd count above the
// suite's 256-byte segment in every dtype (several segments in flight).
inline std::vector<std::size_t> allreduce_counts(int p) {
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::size_t> c = {0, 1, 7, pp - 1, pp + 1, 301};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

template <class B, class S>
void allreduce_matrix(rank_context<B>& ctx, const dc::config& cfg, const char* label) {
  control<B> ctl(ctx);
  dc::communicator<B, S> comm(ctx.make(), cfg);
  const int p = ctx.size;
  std::uint64_t h = fnv_basis;
  for (dc::dtype t : dc::all_dtypes) {
    for (dc::reduce_op op : dc::all_reduce_ops) {
      for (std::size_t count : allreduce_counts(p)) {
        for (bool in_place : {true, false}) {
          const std::size_t bytes = count * dc::dtype_size(t);
          auto in = exact_buffer(ctx.rank, 0, count, t, op, p);
          const auto original = in;
          std::vector<unsigned char> out(bytes + 1, 0xab);
          const dc::tensor_view vin{in.data(), count, t};
          if (in_place) {
            comm.allreduce(vin, op);
          } else {
            comm.allreduce(vin, dc::tensor_view{out.data(), count, t}, op);
            CHECK_MESSAGE(in == original, label << ": out of place changed its input");
          }
          const auto& res = in_place ? in : out;
          std::string first;
          const std::size_t wrong = count_wrong(res.data(), 0, count, t, op, p, &first);
          CHECK_MESSAGE(wrong == 0, label << " " << dc::to_string(t) << " " << dc::to_string(op)
                                          << " count " << count
                                          << (in_place ? " in place: " : " out of place: ") << wrong
                                          << " wrong, " << first);
          CHECK_MESSAGE(res[bytes] == (in_place ? 0x5a : 0xab), label << ": wrote past the end");
          h = fnv(h, res.data(), bytes);
        }
      }
    }
  }
  CHECK_MESSAGE(ctl.same_on_every_rank(h), label << ": ranks hold different bits");
}

// Tensors of one grouped call: mixed dtypes and sizes. With a 256-byte threshold the f32, f16 and
// i8 groups split over several packed buffers, the large tensors run unpacked, and the empty one
// is skipped.
struct tensor_spec {
  dc::dtype type;
  std::size_t count;
};
constexpr tensor_spec grouped_specs[] = {
    {dc::dtype::f32, 7},   {dc::dtype::i32, 300}, {dc::dtype::f16, 1},  {dc::dtype::f32, 30},
    {dc::dtype::bf16, 64}, {dc::dtype::f64, 33},  {dc::dtype::i8, 0},   {dc::dtype::u8, 513},
    {dc::dtype::f32, 40},  {dc::dtype::i64, 5},   {dc::dtype::f16, 17}, {dc::dtype::i8, 200},
    {dc::dtype::f32, 20},  {dc::dtype::f16, 100}, {dc::dtype::i8, 100}, {dc::dtype::f32, 1001},
    {dc::dtype::f64, 1},   {dc::dtype::bf16, 3},  {dc::dtype::u8, 1},   {dc::dtype::i32, 2}};

template <class B>
void grouped_allreduce(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  const int p = ctx.size;
  // Default (everything of one dtype in one buffer), 256 bytes (split), 0 (fusion disabled).
  for (std::size_t threshold : {dc::config{}.fusion_threshold, std::size_t{256}, std::size_t{0}}) {
    dc::config cfg = suite_config<B>();
    cfg.fusion_threshold = threshold;
    dc::communicator<B, dc::strategy::automatic> comm(ctx.make(), cfg);
    std::uint64_t h = fnv_basis;
    // sum, and avg for the division after unpacking; the other ops only change the kernel.
    for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
      std::vector<std::vector<unsigned char>> data;
      std::vector<dc::tensor_view> views;
      for (std::size_t k = 0; k < std::size(grouped_specs); ++k) {
        const tensor_spec& s = grouped_specs[k];
        data.push_back(exact_buffer(ctx.rank, k * 10000, s.count, s.type, op, p));
      }
      for (std::size_t k = 0; k < data.size(); ++k) {
        views.push_back(
            dc::tensor_view{data[k].data(), grouped_specs[k].count, grouped_specs[k].type});
      }
      comm.allreduce(views, op);
      for (std::size_t k = 0; k < data.size(); ++k) {
        const tensor_spec& s = grouped_specs[k];
        std::string first;
        const std::size_t wrong =
            count_wrong(data[k].data(), k * 10000, s.count, s.type, op, p, &first);
        CHECK_MESSAGE(wrong == 0, "threshold " << threshold << " " << dc::to_string(op)
                                               << " tensor " << k << " (" << dc::to_string(s.type)
                                               << " x " << s.count << "): " << wrong << " wrong, "
                                               << first);
        CHECK_MESSAGE(data[k].back() == 0x5a, "tensor " << k << ": written past the end");
        h = fnv(h, data[k].data(), data[k].size());
      }
    }
    CHECK_MESSAGE(ctl.same_on_every_rank(h), "threshold " << threshold << ": ranks differ");
  }
}

// Rounding unit of a floating-point dtype.
inline double unit_roundoff(dc::dtype t) {
  switch (t) {
    case dc::dtype::f16:
      return std::ldexp(1.0, -11);
    case dc::dtype::bf16:
      return std::ldexp(1.0, -8);
    case dc::dtype::f32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// The native allreduce sums in its own order: equal to the ring within the rounding error of a
// p-term sum (plus the final rounding of each), and the same bits on every rank.
template <class B>
void native_matches_ring(rank_context<B>& ctx) {
  control<B> ctl(ctx);
  dc::communicator<B, dc::strategy::native> native(ctx.make(), suite_config<B>());
  dc::communicator<B, dc::strategy::ring> ring(ctx.make(), suite_config<B>());
  const int p = ctx.size;
  const std::size_t count = 4099;
  std::uint64_t h = fnv_basis;
  for (dc::dtype t : {dc::dtype::f16, dc::dtype::bf16, dc::dtype::f32, dc::dtype::f64}) {
    const std::size_t es = dc::dtype_size(t);
    std::vector<unsigned char> in(count * es), a(count * es), b(count * es);
    for (std::size_t i = 0; i < count; ++i) put(in.data(), i, t, random_input(ctx.rank, i, t));
    native.allreduce(dc::tensor_view{in.data(), count, t}, dc::tensor_view{a.data(), count, t});
    ring.allreduce(dc::tensor_view{in.data(), count, t}, dc::tensor_view{b.data(), count, t});
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double magnitude = 0;
      for (int r = 0; r < p; ++r) magnitude += std::fabs(random_input(r, i, t));
      const double tolerance = 2.0 * (p + 1) * unit_roundoff(t) * magnitude;
      if (std::fabs(get(a.data(), i, t) - get(b.data(), i, t)) > tolerance && wrong++ == 0) {
        MESSAGE(dc::to_string(t) << " element " << i << ": native " << get(a.data(), i, t)
                                 << ", ring " << get(b.data(), i, t));
      }
    }
    CHECK_MESSAGE(wrong == 0, dc::to_string(t) << ": " << wrong << " elements differ");
    h = fnv(h, a.data(), a.size());
  }
  CHECK_MESSAGE(ctl.same_on_every_rank(h), "native results differ between ranks");
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("allreduce ring: every dtype x op x count, in and out of place", E,
                          backend_suite_ring) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::allreduce_matrix<B, distcomm::strategy::ring>(
        ctx, backend_suite::suite_config<B>(), "ring");
  });
}

TEST_CASE_TEMPLATE_DEFINE("allreduce tree: every dtype x op x count, in and out of place", E,
                          backend_suite_tree) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::allreduce_matrix<B, distcomm::strategy::tree>(
        ctx, backend_suite::suite_config<B>(), "tree");
  });
}

TEST_CASE_TEMPLATE_DEFINE(
    "allreduce recursive_doubling: every dtype x op x count, in and out of place", E,
    backend_suite_rd) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::allreduce_matrix<B, distcomm::strategy::recursive_doubling>(
        ctx, backend_suite::suite_config<B>(), "recursive_doubling");
  });
}

TEST_CASE_TEMPLATE_DEFINE(
    "allreduce parameter_server, 1 and all servers: every dtype x op x count, in and out of place",
    E, backend_suite_ps) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    for (int servers : {1, 0}) {
      distcomm::config cfg = backend_suite::suite_config<B>();
      cfg.ps_servers = servers;
      backend_suite::allreduce_matrix<B, distcomm::strategy::parameter_server>(
          ctx, cfg, servers == 1 ? "parameter_server k=1" : "parameter_server k=all");
    }
  });
}

TEST_CASE_TEMPLATE_DEFINE("allreduce native: every dtype x op x count, in and out of place", E,
                          backend_suite_native) {
  using B = typename E::backend;
  if constexpr (distcomm::has_native_allreduce_v<B>) {
    E::run([](backend_suite::rank_context<B>& ctx) {
      backend_suite::allreduce_matrix<B, distcomm::strategy::native>(
          ctx, backend_suite::suite_config<B>(), "native");
    });
  } else {
    MESSAGE(B::name << " has no native allreduce: nothing to test");
  }
}

TEST_CASE_TEMPLATE_DEFINE("allreduce automatic: every dtype x op x count, in and out of place", E,
                          backend_suite_automatic) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::allreduce_matrix<B, distcomm::strategy::automatic>(
        ctx, backend_suite::suite_config<B>(), "automatic");
  });
}

TEST_CASE_TEMPLATE_DEFINE("grouped allreduce: mixed tensors, fusion split and disabled", E,
                          backend_suite_grouped) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::grouped_allreduce(ctx); });
}

TEST_CASE_TEMPLATE_DEFINE("native allreduce agrees with ring on random floats", E,
                          backend_suite_native_vs_ring) {
  using B = typename E::backend;
  if constexpr (distcomm::has_native_allreduce_v<B>) {
    E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::native_matches_ring(ctx); });
  } else {
    MESSAGE(B::name << " has no native allreduce: nothing to compare");
  }
}
