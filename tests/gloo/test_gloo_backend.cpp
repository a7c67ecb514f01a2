// The gloo backend under distcomm-run -np N (N >= 2): the point-to-point contract, then every
// strategy x dtype x op x count, in and out of place, against exact values; ranks agree bitwise.
// Exits non-zero with a message on the first failure.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "distcomm/backends/gloo.hpp"
#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

namespace {

int failures = 0;
#define CHECK_OR_FAIL(cond, ...)                                \
  do {                                                          \
    if (!(cond)) {                                              \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
      if (++failures > 20) std::exit(1);                        \
    }                                                           \
  } while (0)

dc::deadline soon(double s = 30.0) { return dc::deadline_after(std::chrono::duration<double>(s)); }

void test_p2p(dc::gloo_backend& b) {
  const int r = b.rank();
  // Ordered matching: three messages of one tag, receives posted first and waited in reverse.
  if (r == 0) {
    int v[3] = {11, 22, 33};
    auto s0 = b.isend(&v[0], sizeof(int), 1, 1);
    auto s1 = b.isend(&v[1], sizeof(int), 1, 1);
    auto s2 = b.isend(&v[2], sizeof(int), 1, 1);
    v[0] = v[1] = v[2] = -1;  // the backend copied them
    s2.wait(soon());
    s1.wait(soon());
    s0.wait(soon());
  } else if (r == 1) {
    int v[3] = {0, 0, 0};
    auto r0 = b.irecv(&v[0], sizeof(int), 0, 1);
    auto r1 = b.irecv(&v[1], sizeof(int), 0, 1);
    auto r2 = b.irecv(&v[2], sizeof(int), 0, 1);
    r2.wait(soon());
    r1.wait(soon());
    r0.wait(soon());
    CHECK_OR_FAIL(v[0] == 11 && v[1] == 22 && v[2] == 33, "order: got %d %d %d", v[0], v[1], v[2]);
    dc::gloo_request done;
    done.wait(soon());  // empty request: complete
    CHECK_OR_FAIL(done.test(), "empty request not complete");
    r0.wait(soon());  // waiting a completed request is a no-op
  }
  // Zero bytes.
  if (r == 0) {
    auto s = b.isend(nullptr, 0, 1, 2);
    s.wait(soon());
  } else if (r == 1) {
    auto q = b.irecv(nullptr, 0, 0, 2);
    q.wait(soon());
    CHECK_OR_FAIL(q.test(), "zero-byte receive not complete");
  }
  // Size mismatch: mismatch_error on the receiver, then the tag still works.
  if (r == 0) {
    double d[2] = {1.0, 2.0};
    int next = 77;
    auto s = b.isend(d, sizeof(d), 1, 3);
    auto s2 = b.isend(&next, sizeof(next), 1, 3);
    s.wait(soon());
    s2.wait(soon());
  } else if (r == 1) {
    int small = 0;
    auto q = b.irecv(&small, sizeof(small), 0, 3);
    bool threw = false;
    try {
      q.wait(soon());
    } catch (const dc::mismatch_error& e) {
      threw = std::string(e.what()).find("16 bytes") != std::string::npos;
      if (!threw) std::fprintf(stderr, "mismatch message: %s\n", e.what());
    }
    CHECK_OR_FAIL(threw, "no mismatch_error for 16 bytes sent into a 4-byte receive");
    CHECK_OR_FAIL(small == 0, "mismatched receive wrote the buffer");
    int next = 0;
    auto q2 = b.irecv(&next, sizeof(next), 0, 3);
    q2.wait(soon());
    CHECK_OR_FAIL(next == 77, "message after a mismatch: got %d", next);
  }
  // Timeout after 1 s naming the peer, the tag and the bytes; then cancel by destruction.
  if (r == 1) {
    std::vector<char> buf(100, 'x');
    {
      // A tag no strategy uses: gloo cannot retract a posted receive, so the cancelled one still
      // consumes (into backend memory) the next message of its (peer, tag).
      auto q = b.irecv(buf.data(), buf.size(), 0, 1000);
      const auto t0 = dc::clock::now();
      bool ok = false;
      try {
        q.wait(dc::deadline_after(std::chrono::seconds(1)));
      } catch (const dc::timeout_error& e) {
        const std::string m = e.what();
        ok = m.find("rank 0") != std::string::npos && m.find("tag 1000") != std::string::npos &&
             m.find("100 bytes") != std::string::npos;
        if (!ok) std::fprintf(stderr, "timeout message: %s\n", e.what());
      }
      const double s = std::chrono::duration<double>(dc::clock::now() - t0).count();
      CHECK_OR_FAIL(ok, "no timeout_error naming rank 0, tag 1000, 100 bytes");
      CHECK_OR_FAIL(s > 0.9 && s < 5.0, "timeout took %.2f s", s);
      CHECK_OR_FAIL(!q.test(), "test() true on a receive nobody sent");
    }  // destroyed while pending: cancelled
    CHECK_OR_FAIL(buf[0] == 'x', "cancelled receive wrote the buffer");
  }
  b.native_barrier(soon());
}

// Integer-valued inputs, small enough that every dtype holds sums and products exactly.
double input_value(std::size_t i, int rank, int p, dc::reduce_op op) {
  const double v = static_cast<double>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5 + 1);
  return op == dc::reduce_op::avg ? v * p : v;
}

double expected_value(std::size_t i, int p, dc::reduce_op op) {
  double acc = input_value(i, 0, p, op);
  for (int r = 1; r < p; ++r) {
    const double x = input_value(i, r, p, op);
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
  return op == dc::reduce_op::avg ? acc / p : acc;
}

void put(dc::dtype t, void* base, std::size_t i, double v) {
  switch (t) {
    case dc::dtype::f16:
      static_cast<dc::f16*>(base)[i] = dc::f16(static_cast<float>(v));
      break;
    case dc::dtype::bf16:
      static_cast<dc::bf16*>(base)[i] = dc::bf16(static_cast<float>(v));
      break;
    case dc::dtype::f32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case dc::dtype::f64:
      static_cast<double*>(base)[i] = v;
      break;
    case dc::dtype::i8:
      static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(v);
      break;
    case dc::dtype::u8:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(v);
      break;
    case dc::dtype::i32:
      static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(v);
      break;
    case dc::dtype::i64:
      static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v);
      break;
  }
}

double get(dc::dtype t, const void* base, std::size_t i) {
  switch (t) {
    case dc::dtype::f16:
      return static_cast<float>(static_cast<const dc::f16*>(base)[i]);
    case dc::dtype::bf16:
      return static_cast<float>(static_cast<const dc::bf16*>(base)[i]);
    case dc::dtype::f32:
      return static_cast<const float*>(base)[i];
    case dc::dtype::f64:
      return static_cast<const double*>(base)[i];
    case dc::dtype::i8:
      return static_cast<const std::int8_t*>(base)[i];
    case dc::dtype::u8:
      return static_cast<const std::uint8_t*>(base)[i];
    case dc::dtype::i32:
      return static_cast<double>(static_cast<const std::int32_t*>(base)[i]);
    case dc::dtype::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <class S>
std::uint64_t test_strategy(dc::gloo_backend b, const char* name) {
  dc::communicator<dc::gloo_backend, S> comm(b);
  const int p = comm.size();
  const int r = comm.rank();
  std::uint64_t h = 1469598103934665603ull;
  const std::size_t counts[] = {0, 1, 7, 1000, 100003};
  for (dc::dtype t : dc::all_dtypes) {
    for (dc::reduce_op op : dc::all_reduce_ops) {
      for (std::size_t n : counts) {
        for (int in_place = 0; in_place < 2; ++in_place) {
          const std::size_t es = dc::dtype_size(t);
          std::vector<unsigned char> in(n * es + 1), out(n * es + 1);
          for (std::size_t i = 0; i < n; ++i) put(t, in.data(), i, input_value(i, r, p, op));
          dc::tensor_view vin{in.data(), n, t};
          dc::tensor_view vout{out.data(), n, t};
          if (in_place) {
            comm.allreduce(vin, op);
          } else {
            comm.allreduce(vin, vout, op);
          }
          const void* res = in_place ? in.data() : out.data();
          for (std::size_t i = 0; i < n; ++i) {
            const double want = expected_value(i, p, op);
            const double got = get(t, res, i);
            if (got != want) {
              CHECK_OR_FAIL(false, "%s %s %s n=%zu %s: [%zu] = %g, want %g", name, dc::to_string(t),
                            dc::to_string(op), n, in_place ? "in place" : "out of place", i, got,
                            want);
              break;
            }
          }
          if (!in_place) {
            for (std::size_t i = 0; i < n; ++i) {
              if (get(t, in.data(), i) != input_value(i, r, p, op)) {
                CHECK_OR_FAIL(false, "%s: out-of-place allreduce changed its input", name);
                break;
              }
            }
          }
          h = fnv(h, res, n * es);
        }
      }
    }
  }
  std::printf("rank %d: %s ok\n", r, name);
  std::fflush(stdout);
  return h;
}

}  // namespace

int main() {
  try {
    dc::job j = dc::bootstrap();
    dc::gloo_backend b(j);
    if (b.size() < 2) {
      std::fprintf(stderr, "run under distcomm-run -np 2 or more\n");
      return 1;
    }
    test_p2p(b);
    std::uint64_t h = 0;
    h ^= test_strategy<dc::strategy::ring>(b, "ring");
    h ^= test_strategy<dc::strategy::tree>(b, "tree") * 3;
    h ^= test_strategy<dc::strategy::parameter_server>(b, "parameter_server") * 5;
    h ^= test_strategy<dc::strategy::native>(b, "native") * 7;
    h ^= test_strategy<dc::strategy::automatic>(b, "automatic") * 11;

    // Native vs ring on non-integer data: equal within rounding.
    {
      const std::size_t n = 4099;
      std::vector<float> x(n), a(n), c(n);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = 0.1f * static_cast<float>(i % 97) + 0.37f * b.rank();
      dc::communicator<dc::gloo_backend, dc::strategy::ring> ring(b);
      dc::communicator<dc::gloo_backend, dc::strategy::native> native(b);
      ring.allreduce(dc::view(x.data(), n), dc::view(a.data(), n));
      native.allreduce(dc::view(x.data(), n), dc::view(c.data(), n));
      for (std::size_t i = 0; i < n; ++i) {
        if (std::fabs(a[i] - c[i]) > 1e-5f * std::max(1.0f, std::fabs(a[i]))) {
          CHECK_OR_FAIL(false, "native vs ring [%zu]: %g vs %g", i, a[i], c[i]);
          break;
        }
      }
      h = fnv(h, a.data(), n * sizeof(float));
    }

    // Bitwise agreement across ranks: every rank's hash of every result equals rank 0's.
    dc::bytes mine(sizeof(h));
    std::memcpy(mine.data(), &h, sizeof(h));
    j.kv->set("test_gloo/hash/" + std::to_string(b.rank()), mine);
    const dc::bytes ref = j.kv->get("test_gloo/hash/0");
    CHECK_OR_FAIL(ref == mine, "rank %d's results differ bitwise from rank 0's", b.rank());
    b.native_barrier(soon());

    // Last, because it ends the communicator: rank 1 aborts; its own later calls fail with the
    // reason, and rank 0's pending receive from it fails fast with peer_lost_error.
    if (b.rank() == 1) {
      b.abort("test abort");
      bool lost = false;
      try {
        int x = 0;
        auto q = b.irecv(&x, sizeof(x), 0, 1001);
        q.wait(soon(5));
      } catch (const dc::peer_lost_error& e) {
        lost = std::string(e.what()).find("test abort") != std::string::npos;
      }
      CHECK_OR_FAIL(lost, "no peer_lost_error with the reason after abort()");
    } else if (b.rank() == 0) {
      const auto t0 = dc::clock::now();
      bool lost = false;
      try {
        int x = 0;
        auto q = b.irecv(&x, sizeof(x), 1, 1001);
        q.wait(soon(20));
      } catch (const dc::peer_lost_error& e) {
        lost = true;
      }
      const double s = std::chrono::duration<double>(dc::clock::now() - t0).count();
      CHECK_OR_FAIL(lost && s < 10.0, "rank 1's abort: lost=%d after %.2f s", lost ? 1 : 0, s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: exception: %s\n", e.what());
    return 1;
  }
  if (failures) return 1;
  std::printf("test_gloo_backend: all passed\n");
  return 0;
}
