// Every strategy x dtype x op x world size 1..8 x edge-case counts, in place and out of place, on
// the local backend: results within a dtype-appropriate tolerance of a float64 (or exact integer)
// reference, and bitwise equal on every rank. Also reduce_scatter, allgather, broadcast, barrier.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

namespace {

// ---- typed access to raw buffers ------------------------------------------------------------

double get(const void* p, std::size_t i, dc::dtype t) {
  switch (t) {
    case dc::dtype::f16:
      return static_cast<float>(static_cast<const dc::f16*>(p)[i]);
    case dc::dtype::bf16:
      return static_cast<float>(static_cast<const dc::bf16*>(p)[i]);
    case dc::dtype::f32:
      return static_cast<const float*>(p)[i];
    case dc::dtype::f64:
      return static_cast<const double*>(p)[i];
    case dc::dtype::i8:
      return static_cast<const std::int8_t*>(p)[i];
    case dc::dtype::u8:
      return static_cast<const std::uint8_t*>(p)[i];
    case dc::dtype::i32:
      return static_cast<const std::int32_t*>(p)[i];
    case dc::dtype::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
  }
  return 0;
}

void put(void* p, std::size_t i, dc::dtype t, double v) {
  switch (t) {
    case dc::dtype::f16:
      static_cast<dc::f16*>(p)[i] = dc::f16(static_cast<float>(v));
      return;
    case dc::dtype::bf16:
      static_cast<dc::bf16*>(p)[i] = dc::bf16(static_cast<float>(v));
      return;
    case dc::dtype::f32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case dc::dtype::f64:
      static_cast<double*>(p)[i] = v;
      return;
    case dc::dtype::i8:
      static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      return;
    case dc::dtype::u8:
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
      return;
    case dc::dtype::i32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      return;
    case dc::dtype::i64:
      static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      return;
  }
}

// Wraps an exact integer result to the dtype, as two's complement arithmetic does.
std::int64_t wrap(std::int64_t v, dc::dtype t) {
  switch (t) {
    case dc::dtype::i8:
      return static_cast<std::int8_t>(static_cast<std::uint8_t>(v & 0xff));
    case dc::dtype::u8:
      return static_cast<std::uint8_t>(v & 0xff);
    case dc::dtype::i32:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(v & 0xffffffff));
    default:
      return v;
  }
}

// Input of `rank` at element i: deterministic, varied, and in a range where the op stays
// meaningful (products near 1 for floats, small magnitudes for integers).
double input(int rank, std::size_t i, dc::dtype t, dc::reduce_op op) {
  std::uint64_t h = (static_cast<std::uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull ^
                    (static_cast<std::uint64_t>(i) + 7) * 0xc2b2ae3d27d4eb4full;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const double u = static_cast<double>(h % 2001) / 1000.0 - 1.0;  // [-1, 1]
  if (dc::is_floating_point(t)) return op == dc::reduce_op::prod ? 1.0 + 0.1 * u : u * 4.0;
  const auto k = static_cast<std::int64_t>(h % 7) - 3;  // [-3, 3]
  if (t == dc::dtype::u8)
    return static_cast<double>(op == dc::reduce_op::prod ? 1 + h % 3 : h % 40);
  return static_cast<double>(k);
}

double unit_roundoff(dc::dtype t) {
  switch (t) {
    case dc::dtype::f16:
      return std::ldexp(1.0, -10);
    case dc::dtype::bf16:
      return std::ldexp(1.0, -7);
    case dc::dtype::f32:
      return std::ldexp(1.0, -22);
    default:
      return std::ldexp(1.0, -50);
  }
}

// Rounds v to what dtype t can hold (inputs are compared after this).
double representable(double v, dc::dtype t) {
  unsigned char tmp[8];
  put(tmp, 0, t, v);
  return get(tmp, 0, t);
}

// ---- the case runner ------------------------------------------------------------------------

// Every registered strategy; the parameter server with one server, two, and every rank.
struct strat {
  std::string name;  // the registry's
  int ps_servers;    // -1: the configuration's
  std::string label;
};

std::vector<strat> every_strategy() {
  std::vector<strat> all;
  for (const dc::strategy_info& i : dc::strategies()) {
    if (std::string(i.name) == "ps") {
      for (int k : {1, 2, 0}) {
        all.push_back(
            {i.name, k, "ps(k=" + (k == 0 ? std::string("all") : std::to_string(k)) + ")"});
      }
    } else {
      all.push_back({i.name, -1, i.name});
    }
  }
  return all;
}
const std::vector<strat> all_strats = every_strategy();

const char* name(const strat& s) { return s.label.c_str(); }

// Runs f on `p` ranks with strategy s and configuration c.
void run_world(int p, const strat& s, dc::config c,
               const std::function<void(dc::any_communicator&, int)>& f) {
  if (s.ps_servers >= 0) c.ps_servers = s.ps_servers;
  dc::local_world world(p);
  world.run([&](dc::local_backend b) {
    dc::any_communicator comm = dc::make_communicator(std::move(b), s.name, c);
    f(comm, comm.rank());
  });
}

dc::config test_config(std::size_t segment_bytes) {
  dc::config c;
  c.timeout = std::chrono::seconds(60);
  c.segment_bytes = segment_bytes;
  // Exercise both halves of automatic's table at test sizes.
  c.algo = dc::algo_table::parse("tree:0-1K;ring:1K-16K;ps:16K-64K;native:64K-max", "test");
  return c;
}

std::vector<unsigned char> make_input(int rank, std::size_t count, dc::dtype t, dc::reduce_op op) {
  std::vector<unsigned char> v(count * dc::dtype_size(t) + 1);
  for (std::size_t i = 0; i < count; ++i) put(v.data(), i, t, input(rank, i, t, op));
  return v;
}

// Reference reduction of element i over ranks [0, p).
double reference(int p, std::size_t i, dc::dtype t, dc::reduce_op op, double* magnitude) {
  if (!dc::is_floating_point(t)) {
    std::int64_t acc = static_cast<std::int64_t>(representable(input(0, i, t, op), t));
    for (int r = 1; r < p; ++r) {
      const auto x = static_cast<std::int64_t>(representable(input(r, i, t, op), t));
      switch (op) {
        case dc::reduce_op::sum:
        case dc::reduce_op::avg:
          acc = wrap(acc + x, t);
          break;
        case dc::reduce_op::prod:
          acc = wrap(acc * x, t);
          break;
        case dc::reduce_op::min:
          acc = std::min(acc, x);
          break;
        case dc::reduce_op::max:
          acc = std::max(acc, x);
          break;
      }
    }
    if (op == dc::reduce_op::avg) acc = acc / p;
    *magnitude = 0;
    return static_cast<double>(acc);
  }
  double acc = representable(input(0, i, t, op), t);
  double mag = std::fabs(acc);
  for (int r = 1; r < p; ++r) {
    const double x = representable(input(r, i, t, op), t);
    mag += std::fabs(x);
    switch (op) {
      case dc::reduce_op::sum:
      case dc::reduce_op::avg:
        acc += x;
        break;
      case dc::reduce_op::prod:
        acc *= x;
        break;
      case dc::reduce_op::min:
        acc = std::min(acc, x);
        break;
      case dc::reduce_op::max:
        acc = std::max(acc, x);
        break;
    }
  }
  if (op == dc::reduce_op::avg) {
    acc /= p;
    mag /= p;
  }
  if (op == dc::reduce_op::prod) mag = std::fabs(acc);
  *magnitude = mag;
  return acc;
}

// The float64 / exact-integer reference of one (p, dtype, op): values and magnitudes, computed
// once and shared by every strategy and placement.
struct expected {
  std::vector<double> value;
  std::vector<double> magnitude;
};

expected make_expected(int p, std::size_t count, dc::dtype t, dc::reduce_op op) {
  expected e;
  e.value.resize(count);
  e.magnitude.resize(count);
  for (std::size_t i = 0; i < count; ++i) e.value[i] = reference(p, i, t, op, &e.magnitude[i]);
  return e;
}

// Checks out against the reference; returns the number of wrong elements and describes the first.
std::size_t check_allreduce(const void* out, const expected& e, int p, dc::dtype t,
                            dc::reduce_op op, std::string* first) {
  std::size_t wrong = 0;
  const double u = unit_roundoff(t);
  const bool exact =
      !dc::is_floating_point(t) || op == dc::reduce_op::min || op == dc::reduce_op::max;
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const double ref = e.value[i];
    const double got = get(out, i, t);
    const bool ok =
        exact ? got == ref : std::fabs(got - ref) <= (p + 1) * u * e.magnitude[i] + 1e-300;
    if (!ok && wrong++ == 0) {
      *first = "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " +
               std::to_string(ref);
    }
  }
  return wrong;
}

std::vector<std::size_t> counts_for(int p, dc::dtype t, std::size_t segment_bytes) {
  const std::size_t seg = segment_bytes / dc::dtype_size(t);
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::size_t> c = {0, 1, 7, pp + 1, seg - 1, seg + 1, pp * seg - 1, pp * seg + 1};
  if (p > 1) c.push_back(pp - 1);
  return c;
}

struct ar_case {
  dc::dtype type;
  dc::reduce_op op;
  std::size_t count;
  bool in_place;
};

// References by (p, dtype, op, count) and inputs by (rank, dtype, op, count), shared by every
// strategy of one world size.
struct reference_cache {
  std::map<std::tuple<int, int, int, std::size_t>, expected> expect;
  std::map<std::tuple<int, int, int, std::size_t>, std::vector<unsigned char>> inputs;
};

// Runs all `cases` one after the other in one world of p ranks with strategy s (threads start
// once), then checks every rank's result of every case against the reference and rank 0's bits.
void allreduce_cases(int p, const strat& s, const std::vector<ar_case>& cases,
                     const dc::config& cfg, reference_cache& refs) {
  const auto pp = static_cast<std::size_t>(p);
  // Inputs are generated once per (rank, case) and shared by every strategy.
  std::vector<const std::vector<unsigned char>*> inputs;
  for (int r = 0; r < p; ++r) {
    for (const ar_case& c : cases) {
      const auto key =
          std::make_tuple(r, static_cast<int>(c.type), static_cast<int>(c.op), c.count);
      auto it = refs.inputs.find(key);
      if (it == refs.inputs.end()) {
        it = refs.inputs.emplace(key, make_input(r, c.count, c.type, c.op)).first;
      }
      inputs.push_back(&it->second);
    }
  }
  std::vector<std::vector<std::vector<unsigned char>>> out(pp);
  run_world(p, s, cfg, [&](dc::any_communicator& o, int r) {
    auto& mine = out[static_cast<std::size_t>(r)];
    for (std::size_t k = 0; k < cases.size(); ++k) {
      const ar_case& c = cases[k];
      const auto& original = *inputs[static_cast<std::size_t>(r) * cases.size() + k];
      const std::size_t bytes = c.count * dc::dtype_size(c.type);
      std::vector<unsigned char> in = original;
      dc::tensor_view vin{in.data(), c.count, c.type};
      if (c.in_place) {
        o.allreduce(vin, vin, c.op);
        mine.push_back(std::move(in));
      } else {
        std::vector<unsigned char> res(bytes + 1, 0xab);
        o.allreduce(vin, dc::tensor_view{res.data(), c.count, c.type}, c.op);
        // Out of place leaves the input alone (flagged through the guard byte).
        if (in != original) res[bytes] = 0xee;
        mine.push_back(std::move(res));
      }
    }
  });
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const ar_case& c = cases[k];
    CAPTURE(p);
    CAPTURE(name(s));
    CAPTURE(dc::to_string(c.type));
    CAPTURE(dc::to_string(c.op));
    CAPTURE(c.count);
    CAPTURE(c.in_place);
    const std::size_t bytes = c.count * dc::dtype_size(c.type);
    const auto key = std::make_tuple(p, static_cast<int>(c.type), static_cast<int>(c.op), c.count);
    auto it = refs.expect.find(key);
    if (it == refs.expect.end()) {
      it = refs.expect.emplace(key, make_expected(p, c.count, c.type, c.op)).first;
    }
    std::string first;
    const std::size_t wrong =
        check_allreduce(out[0][k].data(), it->second, p, c.type, c.op, &first);
    CHECK_MESSAGE(wrong == 0, wrong << " wrong elements, " << first);
    for (std::size_t r = 0; r < pp; ++r) {
      const auto& res = out[r][k];
      CHECK_MESSAGE(res[bytes] == (c.in_place ? 0 : 0xab),
                    "rank " << r << " wrote past the end or modified its input");
      if (r > 0) {
        CHECK_MESSAGE(std::memcmp(out[0][k].data(), res.data(), bytes) == 0,
                      "rank " << r << " differs from rank 0");
      }
    }
  }
}

}  // namespace

TEST_CASE("allreduce: every strategy x dtype x op x world 1..8 x edge counts, both placements") {
  constexpr std::size_t seg_bytes = 256;  // small, so segment edges are cheap to cross
  const dc::config cfg = test_config(seg_bytes);
  std::size_t total = 0;
  for (int p = 1; p <= 8; ++p) {
    reference_cache refs;
    std::vector<ar_case> cases;
    for (dc::dtype t : dc::all_dtypes) {
      for (dc::reduce_op op : dc::all_reduce_ops) {
        for (std::size_t count : counts_for(p, t, seg_bytes)) {
          for (bool in_place : {true, false}) cases.push_back({t, op, count, in_place});
        }
      }
    }
    for (const strat& s : all_strats) {
      allreduce_cases(p, s, cases, cfg, refs);
      total += cases.size();
    }
  }
  MESSAGE(total << " allreduce cases");
}

// Worlds of this test: under AddressSanitizer (scripts/test.sh runs the unit tests only there)
// a world of 2 and one of 5 (not a power of two: recursive doubling's extra ranks): the
// segment pipelines are the same at every size, and all five worlds took 99 s of the sanitizer
// pass's 178 s (2-core VM), one test holding up the rest.
#if defined(__SANITIZE_ADDRESS__)
constexpr int large_worlds[] = {2, 5};
#else
constexpr int large_worlds[] = {1, 2, 3, 5, 8};
#endif

TEST_CASE("allreduce: 1 000 003 elements, every strategy and dtype, world 1..8") {
  dc::config cfg = test_config(256 << 10);
  cfg.algo = dc::algo_table{};
  for (int p : large_worlds) {
    reference_cache refs;
    std::vector<ar_case> cases;
    for (dc::dtype t : dc::all_dtypes) {
      // sum exercises the arithmetic and avg the finishing division; the other ops share the
      // data path (and are covered at every edge count above and by the kernel tests).
      for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
        cases.push_back({t, op, 1000003, (p + static_cast<int>(t)) % 2 == 0});
      }
    }
    for (const strat& s : all_strats) allreduce_cases(p, s, cases, cfg, refs);
  }
}

TEST_CASE("deterministic mode: every strategy gives the same bits") {
  dc::config cfg = test_config(256);
  cfg.deterministic = true;
  for (int p = 1; p <= 8; ++p) {
    for (dc::dtype t : {dc::dtype::f16, dc::dtype::bf16, dc::dtype::f32, dc::dtype::f64}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{333}, std::size_t{5000}}) {
        std::vector<unsigned char> first;
        for (const strat& s : all_strats) {
          std::vector<unsigned char> rank0;
          run_world(p, s, cfg, [&](dc::any_communicator& o, int r) {
            auto in = make_input(r, count, t, dc::reduce_op::sum);
            o.allreduce(dc::tensor_view{in.data(), count, t}, dc::tensor_view{in.data(), count, t},
                        dc::reduce_op::sum);
            if (r == 0) rank0 = std::move(in);
          });
          CAPTURE(p);
          CAPTURE(name(s));
          CAPTURE(dc::to_string(t));
          CAPTURE(count);
          if (first.empty()) {
            first = rank0;
          } else {
            CHECK(first == rank0);
          }
        }
      }
    }
  }
}

TEST_CASE("reduce_scatter, allgather, broadcast, barrier on every strategy") {
  constexpr std::size_t seg_bytes = 256;
  for (bool deterministic : {false, true}) {
    dc::config cfg = test_config(seg_bytes);
    cfg.deterministic = deterministic;
    for (int p = 1; p <= 8; ++p) {
      const auto pp = static_cast<std::size_t>(p);
      for (const strat& s : all_strats) {
        // Every rank runs the same sequence of collectives in one world; results are kept in
        // call order and checked afterwards.
        std::vector<std::vector<std::vector<unsigned char>>> got(pp);
        std::atomic<int> arrived{0};
        std::atomic<bool> early{false};
        run_world(p, s, cfg, [&](dc::any_communicator& o, int r) {
          auto& keep = got[static_cast<std::size_t>(r)];
          for (dc::dtype t : dc::all_dtypes) {
            const std::size_t es = dc::dtype_size(t);
            for (std::size_t count :
                 {std::size_t{0}, std::size_t{1}, std::size_t{7}, seg_bytes / es + 1}) {
              for (dc::reduce_op op : dc::all_reduce_ops) {
                auto in = make_input(r, count * pp, t, op);
                std::vector<unsigned char> res(count * es + 1, 0);
                o.reduce_scatter(dc::tensor_view{in.data(), count * pp, t},
                                 dc::tensor_view{res.data(), count, t}, op);
                keep.push_back(std::move(res));
              }
              auto in = make_input(r, count, t, dc::reduce_op::sum);
              std::vector<unsigned char> all(count * es * pp + 1, 0);
              o.allgather(dc::tensor_view{in.data(), count, t},
                          dc::tensor_view{all.data(), count * pp, t});
              keep.push_back(std::move(all));
              for (int root = 0; root < p; ++root) {
                auto buf = make_input(r, count, t, dc::reduce_op::sum);
                o.broadcast(dc::tensor_view{buf.data(), count, t}, root);
                keep.push_back(std::move(buf));
              }
            }
          }
          // barrier: nobody leaves before everybody arrived.
          arrived.fetch_add(1);
          o.barrier();
          if (arrived.load() != p) early = true;
        });
        CHECK_FALSE(early.load());
        for (int r = 0; r < p; ++r) {
          const auto& keep = got[static_cast<std::size_t>(r)];
          std::size_t k = 0;
          for (dc::dtype t : dc::all_dtypes) {
            const std::size_t es = dc::dtype_size(t);
            for (std::size_t count :
                 {std::size_t{0}, std::size_t{1}, std::size_t{7}, seg_bytes / es + 1}) {
              CAPTURE(deterministic);
              CAPTURE(p);
              CAPTURE(r);
              CAPTURE(name(s));
              CAPTURE(dc::to_string(t));
              CAPTURE(count);
              for (dc::reduce_op op : dc::all_reduce_ops) {
                CAPTURE(dc::to_string(op));
                const auto& res = keep[k++];
                const bool exact = !dc::is_floating_point(t) || op == dc::reduce_op::min ||
                                   op == dc::reduce_op::max;
                for (std::size_t i = 0; i < count; ++i) {
                  double mag = 0;
                  const double ref =
                      reference(p, static_cast<std::size_t>(r) * count + i, t, op, &mag);
                  const double v = get(res.data(), i, t);
                  const bool ok =
                      exact ? v == ref
                            : std::fabs(v - ref) <= (p + 1) * unit_roundoff(t) * mag + 1e-300;
                  CHECK_MESSAGE(ok,
                                "reduce_scatter element " << i << " got " << v << " want " << ref);
                }
              }
              const auto& all = keep[k++];
              for (int q = 0; q < p; ++q) {
                const auto expect = make_input(q, count, t, dc::reduce_op::sum);
                CHECK_MESSAGE(std::memcmp(all.data() + static_cast<std::size_t>(q) * count * es,
                                          expect.data(), count * es) == 0,
                              "allgather block " << q);
              }
              for (int root = 0; root < p; ++root) {
                CHECK_MESSAGE(keep[k++] == make_input(root, count, t, dc::reduce_op::sum),
                              "broadcast from root " << root);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a segment size far larger than the message costs no more scratch than the message") {
  dc::config cfg = test_config(std::size_t{1} << 30);  // the largest DISTCOMM_SEGMENT_SIZE
  cfg.algo = dc::algo_table{};
  for (bool deterministic : {false, true}) {
    cfg.deterministic = deterministic;
    reference_cache refs;
    const std::vector<ar_case> cases = {{dc::dtype::f32, dc::reduce_op::sum, 10, true},
                                        {dc::dtype::f64, dc::reduce_op::avg, 3, false}};
    for (const strat& s : all_strats) allreduce_cases(3, s, cases, cfg, refs);
  }
}
