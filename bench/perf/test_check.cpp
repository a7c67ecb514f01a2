// The benchmarks' correctness check must tell right from wrong: for every collective, dtype and
// op it accepts the result DistComm's own fold computes from the ranks' inputs, and counts one
// wrong element when one element of that result is changed.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "check.hpp"
#include "distcomm/core/reduce.hpp"

namespace db = distcomm::bench;
using distcomm::dtype;
using distcomm::reduce_op;

namespace {

constexpr std::size_t n = 300;  // elements per rank; more than the check's period of 132

// Every rank's input for collective c, then the result each rank should hold, in bytes.
std::vector<unsigned char> expected(db::collective c, dtype t, reduce_op op, int p, int root) {
  const std::size_t es = distcomm::dtype_size(t);
  const std::size_t len = c == db::collective::allgather ? n : n * static_cast<std::size_t>(p);
  std::vector<std::vector<unsigned char>> in(static_cast<std::size_t>(p),
                                             std::vector<unsigned char>(len * es));
  for (int r = 0; r < p; ++r) {
    db::data_check(c, t, op, p, r, root, n)
        .fill_input(in[static_cast<std::size_t>(r)].data(), 0, len);
  }
  std::vector<unsigned char> out(n * static_cast<std::size_t>(p) * es);
  switch (c) {
    case db::collective::allreduce:
    case db::collective::reduce_scatter: {
      std::vector<const void*> ptrs;
      for (const auto& v : in) ptrs.push_back(v.data());
      distcomm::fold(out.data(), ptrs.data(), ptrs.size(), len, t, op);
      if (op == reduce_op::avg) {
        distcomm::divide(out.data(), out.data(), len, t, static_cast<std::size_t>(p));
      }
      break;
    }
    case db::collective::allgather:
      for (int r = 0; r < p; ++r) {
        std::memcpy(out.data() + static_cast<std::size_t>(r) * n * es,
                    in[static_cast<std::size_t>(r)].data(), n * es);
      }
      break;
    case db::collective::broadcast:
      out = in[static_cast<std::size_t>(root)];
      break;
    case db::collective::alltoall:  // a result per rank: the test cases below
    case db::collective::alltoallv:
      break;
  }
  return out;
}

}  // namespace

TEST_CASE("the check accepts right results and counts wrong elements") {
  const db::collective collectives[] = {db::collective::allreduce, db::collective::reduce_scatter,
                                        db::collective::allgather, db::collective::broadcast};
  for (db::collective c : collectives) {
    for (dtype t : distcomm::all_dtypes) {
      for (reduce_op op : distcomm::all_reduce_ops) {
        for (int p : {1, 2, 3, 7}) {
          CAPTURE(db::to_string(c));
          CAPTURE(distcomm::to_string(t));
          CAPTURE(distcomm::to_string(op));
          CAPTURE(p);
          const int root = p - 1;
          std::vector<unsigned char> out = expected(c, t, op, p, root);
          const std::size_t es = distcomm::dtype_size(t);
          const std::size_t len = out.size() / es;
          for (int r = 0; r < p; ++r) {
            const db::data_check dc(c, t, op, p, r, root, n);
            CHECK(dc.wrong(out.data(), 0, len) == 0);
            // One slice, addressed by its index in the full result.
            CHECK(dc.wrong(out.data() + 5 * es, 5, 17) == 0);
          }
          const db::data_check dc(c, t, op, p, 0, root, n);
          std::vector<unsigned char> bad = out;
          std::memset(bad.data() + 7 * es, 0x7f, es);  // above every pattern value, or NaN
          CHECK(dc.wrong(bad.data(), 0, len) == 1);
          dc.fill_sentinel(bad.data(), len);
          CHECK(dc.wrong(bad.data(), 0, len) == static_cast<std::int64_t>(len));
        }
      }
    }
  }
}

TEST_CASE("the check of alltoall: block q of rank r's result is block r of rank q's input") {
  for (dtype t : distcomm::all_dtypes) {
    for (int p : {1, 2, 3, 7}) {
      CAPTURE(distcomm::to_string(t));
      CAPTURE(p);
      const std::size_t es = distcomm::dtype_size(t);
      const auto pp = static_cast<std::size_t>(p);
      std::vector<std::vector<unsigned char>> in(pp, std::vector<unsigned char>(n * pp * es));
      for (int r = 0; r < p; ++r) {
        db::data_check(db::collective::alltoall, t, reduce_op::sum, p, r, 0, n)
            .fill_input(in[static_cast<std::size_t>(r)].data(), 0, n * pp);
      }
      for (int r = 0; r < p; ++r) {
        std::vector<unsigned char> out(n * pp * es);
        for (std::size_t q = 0; q < pp; ++q) {
          std::memcpy(out.data() + q * n * es, in[q].data() + static_cast<std::size_t>(r) * n * es,
                      n * es);
        }
        const db::data_check dc(db::collective::alltoall, t, reduce_op::sum, p, r, 0, n);
        CHECK(dc.wrong(out.data(), 0, n * pp) == 0);
        if (p > 1) {
          std::memcpy(out.data(), in[1].data(), es);  // another rank's block, or another element
          CHECK(dc.wrong(out.data(), 0, n * pp) >= 0);
          std::memset(out.data() + 3 * es, 0x7f, es);
          CHECK(dc.wrong(out.data(), 0, n * pp) >= 1);
        }
      }
    }
  }
}

TEST_CASE("the check of alltoallv: skewed counts, rank q's block at its displacement") {
  for (int p : {1, 2, 3, 5}) {
    CAPTURE(p);
    const dtype t = dtype::i32;
    const std::size_t es = distcomm::dtype_size(t);
    const auto pp = static_cast<std::size_t>(p);
    const std::vector<std::size_t> c = db::skewed_counts(n, p);
    std::size_t sent = 0;
    for (std::size_t q = 0; q < pp; ++q) {
      CHECK(c[q] <= 2 * n);
      if (q > 0) CHECK(c[q] >= c[q - 1]);  // the last rank is the most popular
      sent += c[q];
    }
    CHECK(sent <= n * pp);
    std::vector<std::vector<unsigned char>> in(pp, std::vector<unsigned char>(sent * es));
    for (int r = 0; r < p; ++r) {
      db::data_check(db::collective::alltoallv, t, reduce_op::sum, p, r, 0, c[0], 0)
          .fill_input(in[static_cast<std::size_t>(r)].data(), 0, sent);
    }
    for (std::size_t r = 0; r < pp; ++r) {
      std::size_t from = 0;
      for (std::size_t q = 0; q < r; ++q) from += c[q];
      std::vector<unsigned char> out(c[r] * pp * es);
      for (std::size_t q = 0; q < pp; ++q) {
        std::memcpy(out.data() + q * c[r] * es, in[q].data() + from * es, c[r] * es);
      }
      const db::data_check dc(db::collective::alltoallv, t, reduce_op::sum, p, static_cast<int>(r),
                              0, c[r], from);
      CHECK(dc.wrong(out.data(), 0, c[r] * pp) == 0);
      if (c[r] > 0 && p > 1) {
        std::memcpy(out.data(), in[0].data() + (from + c[r] - 1) * es, es);  // a wrong element
        CHECK(dc.wrong(out.data(), 0, c[r] * pp) == 1);
      }
    }
  }
}
