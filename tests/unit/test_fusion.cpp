// Tensor Fusion (fusion::buffer): packing rules, the in-place cutoff, results equal to unfused
// allreduces, buffer reuse, avg, and bitwise-identical results in deterministic mode across
// strategies, thresholds and cutoffs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/fusion/none.hpp"
#include "p2p_only.hpp"

using namespace distcomm;
using namespace std::chrono_literals;

namespace {

struct spec {
  dtype type;
  std::size_t count;
};

using bytes = std::vector<unsigned char>;
using rank_data = std::vector<bytes>;  // one buffer per tensor
// Value of element i of tensor k on rank r.
using fill_fn = std::function<double(int r, std::size_t k, std::size_t i, dtype t)>;

void store_value(dtype t, void* base, std::size_t i, double v) {
  switch (t) {
    case dtype::f16:
      static_cast<f16*>(base)[i] = f16(static_cast<float>(v));
      return;
    case dtype::bf16:
      static_cast<bf16*>(base)[i] = bf16(static_cast<float>(v));
      return;
    case dtype::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case dtype::f64:
      static_cast<double*>(base)[i] = v;
      return;
    case dtype::i8:
      static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(v);
      return;
    case dtype::u8:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v);
      return;
    case dtype::i32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      return;
    case dtype::i64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

double load(dtype t, const void* base, std::size_t i) {
  switch (t) {
    case dtype::f16:
      return static_cast<double>(static_cast<float>(static_cast<const f16*>(base)[i]));
    case dtype::bf16:
      return static_cast<double>(static_cast<float>(static_cast<const bf16*>(base)[i]));
    case dtype::f32:
      return static_cast<const float*>(base)[i];
    case dtype::f64:
      return static_cast<const double*>(base)[i];
    case dtype::i8:
      return static_cast<const std::int8_t*>(base)[i];
    case dtype::u8:
      return static_cast<const std::uint8_t*>(base)[i];
    case dtype::i32:
      return static_cast<const std::int32_t*>(base)[i];
    case dtype::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

rank_data make_data(const std::vector<spec>& specs, int r, const fill_fn& fill) {
  rank_data d(specs.size());
  for (std::size_t k = 0; k < specs.size(); ++k) {
    d[k].assign(specs[k].count * dtype_size(specs[k].type), 0);
    for (std::size_t i = 0; i < specs[k].count; ++i) {
      store_value(specs[k].type, d[k].data(), i, fill(r, k, i, specs[k].type));
    }
  }
  return d;
}

std::vector<tensor_view> views_of(rank_data& d, const std::vector<spec>& specs) {
  std::vector<tensor_view> v;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    v.push_back(tensor_view{d[k].data(), specs[k].count, specs[k].type});
  }
  return v;
}

// Small integers: every sum of 3 or 4 ranks is exact in every dtype (bf16 included).
double int_value(int r, std::size_t k, std::size_t i, dtype t) {
  const double v = static_cast<double>(
                       (r * 3 + static_cast<int>(k % 13) * 7 + static_cast<int>(i % 11) * 5) % 17) -
                   8.0;
  return t == dtype::u8 ? v + 8.0 : v;
}

// Non-integer values in [-1, 1): sums round differently in different orders.
// (A hash, not a seeded engine per element: seeding an mt19937 per element costs seconds.)
double random_value(int r, std::size_t k, std::size_t i, dtype) {
  std::uint64_t z = static_cast<std::uint64_t>(r) * 0x9e3779b97f4a7c15u + k * 0xbf58476d1ce4e5b9u +
                    i * 0x94d049bb133111ebu + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 4503599627370496.0 - 1.0;  // [-1, 1)
}

// 200 tensors cycling through the 8 dtypes; sizes 0, 1, odd and some above 1 KiB / 64 KiB.
std::vector<spec> mixed_specs() {
  const std::size_t sizes[] = {0, 1, 2, 3, 7, 17, 31, 64, 101, 255, 257, 513};
  std::vector<spec> s;
  for (std::size_t k = 0; k < 200; ++k) s.push_back({all_dtypes[k % 8], sizes[(k * 7) % 12]});
  s[8].count = 600;      // f16, 1200 B: above 1 KiB
  s[16].count = 512;     // f16, exactly 1 KiB: runs unpacked at threshold 1 KiB
  s[10].count = 1500;    // f32, 6000 B
  s[13].count = 2000;    // u8, 2000 B
  s[50].count = 20000;   // f32, 80000 B: above 64 KiB
  s[99].count = 9000;    // f64, 72000 B
  s[124].count = 70000;  // i8, 70000 B
  return s;
}

struct outcome {
  std::vector<rank_data> data;                     // by rank, after the last call
  std::vector<std::vector<std::size_t>> capacity;  // by rank: fusion capacity after each call
};

// Every rank makes `calls` grouped allreduces of fresh data; per_tensor = one call per tensor.
template <class Strategy, class Fusion>
outcome run_grouped(int p, const config& cfg, const std::vector<spec>& specs, reduce_op op,
                    const fill_fn& fill, int calls = 1, bool per_tensor = false) {
  outcome o;
  o.data.resize(static_cast<std::size_t>(p));
  o.capacity.resize(static_cast<std::size_t>(p));
  local_world w(p);
  w.run([&](local_backend b) {
    const auto r = static_cast<std::size_t>(b.rank());
    communicator<local_backend, Strategy, Fusion> comm(b, cfg);
    for (int c = 0; c < calls; ++c) {
      o.data[r] = make_data(specs, b.rank(), fill);
      std::vector<tensor_view> views = views_of(o.data[r], specs);
      if (per_tensor) {
        for (const tensor_view& v : views) comm.allreduce(v, op);
      } else {
        comm.allreduce(views, op);
      }
      if constexpr (std::is_same_v<Fusion, fusion::buffer>) {
        o.capacity[r].push_back(comm.fusion().capacity());
      }
    }
  });
  return o;
}

config base_config() {
  config c;
  c.timeout = 2s;
  return c;
}

// The expected result of reducing int_value over p ranks, stored in the tensor's dtype.
bytes expected_int(const spec& s, std::size_t k, int p, reduce_op op) {
  bytes out(s.count * dtype_size(s.type), 0);
  for (std::size_t i = 0; i < s.count; ++i) {
    double sum = 0;
    for (int r = 0; r < p; ++r) sum += int_value(r, k, i, s.type);
    if (op == reduce_op::avg) sum = is_floating_point(s.type) ? sum / p : std::trunc(sum / p);
    store_value(s.type, out.data(), i, sum);
  }
  return out;
}

// One way of running the grouped allreduce: a strategy, a configuration, a fusion policy.
struct variant {
  std::string name;
  std::function<outcome(reduce_op)> run;
};

// Strategy S with fusion::none and with fusion::buffer at several thresholds and one cutoff.
template <class S>
void add_variants(std::vector<variant>& out, const std::string& name, const config& c, int p,
                  const std::vector<spec>& specs) {
  out.push_back({name + "/none", [=, &specs](reduce_op op) {
                   return run_grouped<S, fusion::none>(p, c, specs, op, random_value);
                 }});
  for (std::size_t t :
       {std::size_t{0}, std::size_t{1024}, std::size_t{65536}, config{}.fusion_threshold}) {
    config ct = c;
    ct.fusion_threshold = t;
    out.push_back({name + "/buffer " + std::to_string(t), [=, &specs](reduce_op op) {
                     return run_grouped<S, fusion::buffer>(p, ct, specs, op, random_value);
                   }});
  }
  config cut = c;  // tensors of 1 KiB and more in place, the rest packed
  cut.fusion_cutoff = 1024;
  out.push_back({name + "/buffer cutoff 1K", [=, &specs](reduce_op op) {
                   return run_grouped<S, fusion::buffer>(p, cut, specs, op, random_value);
                 }});
}

}  // namespace

TEST_CASE("fusion::buffer packs by dtype, never beyond the threshold, each tensor once") {
  const std::vector<spec> specs = mixed_specs();
  for (std::size_t threshold :
       {std::size_t{0}, std::size_t{1024}, std::size_t{65536}, std::size_t{64} << 20}) {
    CAPTURE(threshold);
    rank_data d = make_data(specs, 0, int_value);
    const rank_data before = d;
    std::vector<tensor_view> views = views_of(d, specs);
    fusion::buffer fb(threshold);
    CHECK(fb.threshold() == threshold);
    std::vector<dtype> order;
    std::size_t packed_calls = 0;
    std::size_t first_capacity = 0;
    std::size_t max_packed = 0;  // bytes of the largest packed call
    bool bad_call = false;
    for (int round = 0; round < 2; ++round) {
      fb.allreduce(views, reduce_op::sum,
                   [&](const void* in, void* out, std::size_t count, dtype t, reduce_op op) {
                     if (in != out || op != reduce_op::sum || count == 0) bad_call = true;
                     // A call is either one user tensor, in place, or a packed buffer that
                     // fits the threshold.
                     const bool user = std::any_of(views.begin(), views.end(), [&](auto& v) {
                       return v.data == out && v.count == count && v.type == t;
                     });
                     if (!user) {
                       ++packed_calls;
                       max_packed = std::max(max_packed, count * dtype_size(t));
                       if (count * dtype_size(t) > threshold) bad_call = true;
                     }
                     if (round == 0) order.push_back(t);
                     for (std::size_t i = 0; i < count; ++i)
                       store_value(t, out, i, load(t, out, i) + 1);
                   });
      CHECK(fb.capacity() <= threshold);
      if (round == 0) first_capacity = fb.capacity();
    }
    CHECK(fb.capacity() == first_capacity);  // reused, not grown, by the second round
    CHECK(fb.capacity() == max_packed);      // grown to exactly the largest packed group
    CHECK_FALSE(bad_call);
    CHECK(std::is_sorted(order.begin(), order.end()));  // dtype by dtype, in all_dtypes order
    if (threshold == 0) {
      CHECK(packed_calls == 0);
      CHECK(fb.capacity() == 0);
    } else {
      CHECK(packed_calls > 0);
      CHECK(fb.capacity() > 0);
    }
    // Every element of every tensor was reduced exactly twice (once per round).
    for (std::size_t k = 0; k < specs.size(); ++k) {
      for (std::size_t i = 0; i < specs[k].count; ++i) {
        if (load(specs[k].type, d[k].data(), i) != load(specs[k].type, before[k].data(), i) + 2) {
          FAIL_CHECK("tensor " << k << " element " << i << " not reduced exactly twice");
          break;
        }
      }
    }
  }
}

TEST_CASE("fusion: fused results equal the unfused results and the expected sums") {
  const std::vector<spec> specs = mixed_specs();
  const int p = 3;
  const outcome unfused = run_grouped<strategy::automatic, fusion::none>(p, base_config(), specs,
                                                                         reduce_op::sum, int_value);
  for (std::size_t threshold :
       {std::size_t{0}, std::size_t{1024}, std::size_t{65536}, config{}.fusion_threshold}) {
    CAPTURE(threshold);
    config c = base_config();
    c.fusion_threshold = threshold;
    const outcome fused = run_grouped<strategy::automatic, fusion::buffer>(
        p, c, specs, reduce_op::sum, int_value, /*calls=*/2);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      CAPTURE(k);
      CAPTURE(to_string(specs[k].type));
      CAPTURE(specs[k].count);
      const bytes want = expected_int(specs[k], k, p, reduce_op::sum);
      for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
        CAPTURE(r);
        CHECK(fused.data[r][k] == want);
        CHECK(unfused.data[r][k] == want);
      }
    }
    // The buffer stays within the threshold, grows as a fusion::buffer used alone does (the
    // test above checks its packing), and is reused by the second call.
    fusion::buffer standalone(threshold);
    rank_data d = make_data(specs, 0, int_value);
    standalone.allreduce(views_of(d, specs), reduce_op::sum,
                         [](const void*, void*, std::size_t, dtype, reduce_op) {});
    std::size_t largest_group = 0;  // bytes of the largest dtype group (all fit the default)
    for (dtype t : all_dtypes) {
      std::size_t group = 0;
      for (const spec& s : specs) group += s.type == t ? s.count * dtype_size(t) : 0;
      largest_group = std::max(largest_group, group);
    }
    for (const auto& caps : fused.capacity) {
      REQUIRE(caps.size() == 2);
      CHECK(caps[0] <= threshold);
      CHECK(caps[1] == caps[0]);
      if (threshold == 0) CHECK(caps[0] == 0);
      if (threshold != 0) CHECK(caps[0] == standalone.capacity());
      if (threshold == config{}.fusion_threshold) CHECK(caps[0] == largest_group);
    }
  }
}

TEST_CASE("fusion: avg over fused tensors equals avg tensor by tensor") {
  const std::vector<spec> specs = mixed_specs();
  const int p = 3;
  const outcome single = run_grouped<strategy::automatic, fusion::buffer>(
      p, base_config(), specs, reduce_op::avg, int_value, 1, /*per_tensor=*/true);
  for (std::size_t threshold : {std::size_t{1024}, config{}.fusion_threshold}) {
    CAPTURE(threshold);
    config c = base_config();
    c.fusion_threshold = threshold;
    const outcome fused =
        run_grouped<strategy::automatic, fusion::buffer>(p, c, specs, reduce_op::avg, int_value);
    for (std::size_t k = 0; k < specs.size(); ++k) {
      CAPTURE(k);
      CAPTURE(to_string(specs[k].type));
      const bytes want = expected_int(specs[k], k, p, reduce_op::avg);
      for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
        CAPTURE(r);
        CHECK(fused.data[r][k] == single.data[r][k]);
        if (!is_floating_point(specs[k].type)) {
          CHECK(fused.data[r][k] == want);
        } else {
          for (std::size_t i = 0; i < specs[k].count; ++i) {
            const double got = load(specs[k].type, fused.data[r][k].data(), i);
            const double exact = load(specs[k].type, want.data(), i);
            if (std::fabs(got - exact) > 0.01 * std::max(1.0, std::fabs(exact))) {
              FAIL_CHECK("element " << i << ": " << got << " is not about " << exact);
              break;
            }
          }
        }
      }
    }
  }
}

TEST_CASE("fusion: deterministic mode gives the same bits for every strategy and threshold") {
  const int p = 4;
  std::vector<spec> specs;
  const std::size_t sizes[] = {1, 2, 3, 7, 31, 100, 333, 1000, 4097};
  const dtype floats[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::f64};
  for (std::size_t k = 0; k < 48; ++k) specs.push_back({floats[k % 4], sizes[(k * 5) % 9]});
  specs[4].count = 20000;  // f32, 80000 B: above 64 KiB
  specs[9].count = 0;

  config det = base_config();
  det.deterministic = true;

  std::vector<variant> variants;  // the first is the reference
  add_variants<strategy::ring>(variants, "ring", det, p, specs);
  add_variants<strategy::tree>(variants, "tree", det, p, specs);
  config ps1 = det;
  ps1.ps_servers = 1;
  add_variants<strategy::parameter_server>(variants, "ps1", ps1, p, specs);
  config ps2 = det;
  ps2.ps_servers = 2;
  add_variants<strategy::parameter_server>(variants, "ps2", ps2, p, specs);
  add_variants<strategy::automatic>(variants, "automatic", det, p, specs);
  add_variants<strategy::native>(variants, "native", det, p, specs);
  config every = det;  // automatic switching between all four algorithms by size
  every.algo = algo_table::parse("ps:0-1K;native:1K-4K;tree:4K-16K;ring:16K-max", "test");
  add_variants<strategy::automatic>(variants, "automatic(all)", every, p, specs);
  config small_segments = det;  // many pipelined segments per message
  small_segments.segment_bytes = 256;
  add_variants<strategy::ring>(variants, "ring/seg256", small_segments, p, specs);
  add_variants<strategy::tree>(variants, "tree/seg256", small_segments, p, specs);

  for (reduce_op op : {reduce_op::sum, reduce_op::avg}) {
    CAPTURE(to_string(op));
    const outcome reference = variants.front().run(op);
    // The reference is a real reduction of the inputs (not, say, the inputs unchanged): check
    // the first elements of every tensor against a sum in double.
    for (std::size_t k = 0; k < specs.size(); ++k) {
      const dtype t = specs[k].type;
      for (std::size_t i = 0; i < std::min<std::size_t>(specs[k].count, 5); ++i) {
        double sum = 0;
        for (int r = 0; r < p; ++r) {
          alignas(8) unsigned char one[8];
          store_value(t, one, 0, random_value(r, k, i, t));  // the input as the rank holds it
          sum += load(t, one, 0);
        }
        if (op == reduce_op::avg) sum /= p;
        CHECK(load(t, reference.data[0][k].data(), i) == doctest::Approx(sum).epsilon(0.05));
      }
    }
    for (const variant& v : variants) {
      CAPTURE(v.name);
      const outcome o = v.run(op);
      for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
        std::size_t differing = 0;
        for (std::size_t k = 0; k < specs.size(); ++k) {
          differing += o.data[r][k] == reference.data[0][k] ? 0 : 1;
        }
        CAPTURE(r);
        CHECK(differing == 0);
      }
    }
  }

  // Without deterministic mode, ring and tree really do round differently, so the checks above
  // are not satisfied trivially.
  const outcome ring_fast = run_grouped<strategy::ring, fusion::none>(p, base_config(), specs,
                                                                      reduce_op::sum, random_value);
  const outcome ordered = variants.front().run(reduce_op::sum);
  std::size_t differing = 0;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    differing += ring_fast.data[0][k] == ordered.data[0][k] ? 0 : 1;
  }
  CHECK(differing > 0);
}

// ---- the in-place cutoff --------------------------------------------------------------------

namespace {

// One call of the run function, as fusion::buffer makes it.
struct call {
  const void* data;
  std::size_t bytes;
  dtype type;
};

bool is_user(const std::vector<tensor_view>& views, const void* data) {
  return std::any_of(views.begin(), views.end(),
                     [&](const tensor_view& v) { return v.data == data; });
}

std::vector<call> calls_of(fusion::buffer& fb, const std::vector<tensor_view>& views) {
  std::vector<call> calls;
  fb.allreduce(views, reduce_op::sum,
               [&](const void* in, void* out, std::size_t count, dtype t, reduce_op) {
                 CHECK(in == out);
                 calls.push_back({out, count * dtype_size(t), t});
               });
  return calls;
}

}  // namespace

TEST_CASE("fusion::buffer reduces tensors at or above the cutoff in place and packs the rest") {
  // f32 tensors just below, at and just above a 4 KiB cutoff, interleaved with small tensors
  // (as a model interleaves biases with weights), and one f64 tensor at the cutoff.
  const std::vector<spec> specs = {{dtype::f32, 10},   {dtype::f32, 1023}, {dtype::f32, 3},
                                   {dtype::f32, 1024}, {dtype::f32, 5},    {dtype::f32, 1025},
                                   {dtype::f64, 512},  {dtype::f32, 7},    {dtype::f64, 9}};
  rank_data d = make_data(specs, 0, int_value);
  const std::vector<tensor_view> views = views_of(d, specs);
  fusion::buffer fb(std::size_t{64} << 20, 4096);
  CHECK(fb.cutoff() == 4096);
  CHECK_FALSE(fb.in_place(4095));
  CHECK(fb.in_place(4096));

  const std::vector<call> calls = calls_of(fb, views);
  // f32: the two tensors at or above the cutoff in call order, then one buffer of the other
  // four (the large tensors do not split it); f64: the tensor at the cutoff, then the small
  // one alone, unpacked.
  REQUIRE(calls.size() == 5);
  CHECK(calls[0].data == views[3].data);
  CHECK(calls[0].bytes == 4096);
  CHECK(calls[1].data == views[5].data);
  CHECK(calls[1].bytes == 4100);
  CHECK_FALSE(is_user(views, calls[2].data));
  CHECK(calls[2].bytes == (10 + 1023 + 3 + 5 + 7) * 4);
  CHECK(calls[2].type == dtype::f32);
  CHECK(calls[3].data == views[6].data);
  CHECK(calls[3].type == dtype::f64);
  CHECK(calls[4].data == views[8].data);
  CHECK(fb.capacity() == (10 + 1023 + 3 + 5 + 7) * 4);  // only the small tensors are copied

  // Cutoff 0: every tensor below the threshold is packed, as before the cutoff existed.
  fusion::buffer all_packed(std::size_t{64} << 20, 0);
  CHECK_FALSE(all_packed.in_place((std::size_t{64} << 20) - 1));
  const std::vector<call> packed = calls_of(all_packed, views);
  REQUIRE(packed.size() == 2);
  CHECK(packed[0].bytes == (10 + 1023 + 3 + 1024 + 5 + 1025 + 7) * 4);
  CHECK(packed[1].bytes == (512 + 9) * 8);

  // A threshold below the cutoff still bounds the buffer and sends larger tensors in place.
  fusion::buffer small_buffer(1024, 4096);
  CHECK(small_buffer.in_place(1024));
  CHECK_FALSE(small_buffer.in_place(1023));
  for (const call& c : calls_of(small_buffer, views)) {
    if (!is_user(views, c.data)) CHECK(c.bytes <= 1024);
  }
  CHECK(small_buffer.capacity() <= 1024);

  // Threshold 0 still disables fusion, whatever the cutoff.
  fusion::buffer off(0, 4096);
  CHECK(calls_of(off, views).size() == views.size());
  CHECK(off.capacity() == 0);
}

TEST_CASE("fusion: results at the cutoff boundary equal the expected sums and the unfused ones") {
  // Tensors one element below, at and above a 1 KiB cutoff in every dtype, between small ones.
  std::vector<spec> specs;
  for (dtype t : all_dtypes) {
    const std::size_t at = 1024 / dtype_size(t);
    for (std::size_t count : {std::size_t{3}, at - 1, at, std::size_t{1}, at + 1, std::size_t{0}}) {
      specs.push_back({t, count});
    }
  }
  const int p = 3;
  const outcome unfused = run_grouped<strategy::automatic, fusion::none>(p, base_config(), specs,
                                                                         reduce_op::sum, int_value);
  for (std::size_t cutoff : {std::size_t{0}, std::size_t{1024}, std::size_t{1025}}) {
    CAPTURE(cutoff);
    config c = base_config();
    c.fusion_cutoff = cutoff;
    for (reduce_op op : {reduce_op::sum, reduce_op::avg}) {
      CAPTURE(to_string(op));
      const outcome fused =
          run_grouped<strategy::automatic, fusion::buffer>(p, c, specs, op, int_value, /*calls=*/2);
      const outcome single =
          run_grouped<strategy::automatic, fusion::none>(p, c, specs, op, int_value);
      for (std::size_t k = 0; k < specs.size(); ++k) {
        CAPTURE(k);
        CAPTURE(to_string(specs[k].type));
        CAPTURE(specs[k].count);
        for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
          CAPTURE(r);
          CHECK(fused.data[r][k] == single.data[r][k]);
          if (op == reduce_op::sum) {
            CHECK(fused.data[r][k] == expected_int(specs[k], k, p, op));
            CHECK(unfused.data[r][k] == fused.data[r][k]);
          }
        }
      }
      // Only the tensors below the cutoff were copied: per dtype, 3 + 1 elements plus the
      // tensor one below 1 KiB, and the one at 1 KiB too when the cutoff is above it.
      std::size_t packed_max = 0;
      for (dtype t : all_dtypes) {
        const std::size_t at = 1024 / dtype_size(t);
        std::size_t group = (3 + 1 + at - 1) * dtype_size(t);
        if (cutoff == 1025) group += at * dtype_size(t);
        if (cutoff == 0) group += (at + at + 1) * dtype_size(t);
        packed_max = std::max(packed_max, group);
      }
      for (const auto& caps : fused.capacity) {
        REQUIRE(caps.size() == 2);
        CHECK(caps[0] == packed_max);
        CHECK(caps[1] == caps[0]);
      }
    }
  }
}

TEST_CASE("fusion: DISTCOMM_FUSION_CUTOFF reaches fusion::buffer") {
  const auto with = [](const char* value) {
    return config::from_env([=](const char* name) -> const char* {
      return std::string(name) == "DISTCOMM_FUSION_CUTOFF" ? value : nullptr;
    });
  };
  CHECK(fusion::buffer(config{}).cutoff() == default_fusion_cutoff);
  CHECK(fusion::buffer(with("256K")).cutoff() == (std::size_t{256} << 10));
  CHECK(fusion::buffer(with("0")).cutoff() == 0);
  CHECK(with("4M").to_string().find("DISTCOMM_FUSION_CUTOFF=4M\n") != std::string::npos);
  CHECK_THROWS_AS(with("lots"), invalid_argument_error);
}

namespace {
struct backend_with_cutoff : p2p_only {  // a backend of the contract, with defaults of its own
  using p2p_only::p2p_only;
  static constexpr std::size_t default_fusion_cutoff = 12345;
  static constexpr std::size_t default_segment_bytes = 4096;
};
}  // namespace

TEST_CASE("backend defaults: fusion cutoff and segment size, overridden by the variables") {
  static_assert(default_fusion_cutoff == (std::size_t{1} << 20));
  static_assert(fusion_cutoff_for<local_backend> == default_fusion_cutoff);
  static_assert(fusion_cutoff_for<backend_with_cutoff> == 12345);
  using comm_with_cutoff = communicator<backend_with_cutoff>;
  CHECK(comm_with_cutoff::with_backend_defaults(config{}).fusion_cutoff == std::size_t{12345});
  config set;
  set.fusion_cutoff = 0;  // set explicitly (DISTCOMM_FUSION_CUTOFF=0): kept
  CHECK(comm_with_cutoff::with_backend_defaults(set).fusion_cutoff == std::size_t{0});
  CHECK(config{}.to_string().find("DISTCOMM_FUSION_CUTOFF=(backend default)\n") !=
        std::string::npos);
  // The segment size works the same way.
  static_assert(segment_bytes_for<local_backend> == (std::size_t{256} << 10));
  CHECK(comm_with_cutoff::with_backend_defaults(config{}).segment_bytes == std::size_t{4096});
  config seg;
  seg.segment_bytes = 64;
  CHECK(comm_with_cutoff::with_backend_defaults(seg).segment_bytes == std::size_t{64});
  local_world w(1);
  w.run([&](local_backend b) {
    communicator<local_backend> comm(b, config{});
    CHECK(comm.settings().segment_bytes == default_segment_bytes);
    CHECK(comm.settings().fusion_cutoff == default_fusion_cutoff);
    CHECK(comm.fusion().cutoff() == default_fusion_cutoff);
  });
}
