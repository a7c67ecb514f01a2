// alltoall, alltoallv, allgatherv, reduce, gather and scatter through the communicator, on the
// point-to-point strategies, on the native one (the backend's own where it has one) and through
// any_communicator, blocking and non-blocking: ragged counts with zeros, every root, against
// values each rank computes for itself. Deterministic reduce gives the bits of the rank-order
// fold; counts the ranks disagree on give a mismatch_error on every rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "distcomm/any_communicator.hpp"

namespace backend_suite {

// Element sizes 1, 2, 4 and 8; the values below are small integers, exact in each.
constexpr dc::dtype exchange_dtypes[] = {dc::dtype::u8, dc::dtype::f16, dc::dtype::i32,
                                         dc::dtype::f64};

// What rank `from` sends rank `to` at element i.
inline double sent(int from, int to, std::size_t i) {
  return static_cast<double>((from * 7 + to * 3 + static_cast<int>(i % 41)) % 50);
}

inline std::vector<unsigned char> filled(std::size_t count, dc::dtype t, unsigned char fill) {
  return std::vector<unsigned char>(count * dc::dtype_size(t) + 1, fill);
}

// Elements of `buf` from `first` (count of them) that are not sent(from, to, 0..count).
inline std::size_t wrong_block(const std::vector<unsigned char>& buf, std::size_t first,
                               std::size_t count, dc::dtype t, int from, int to) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i)
    wrong += get(buf.data(), first + i, t) != sent(from, to, i);
  return wrong;
}

// Per-rank counts with zeros: what rank `from` sends rank `to` in round `c`, scaled by `base`.
inline std::size_t ragged(int from, int to, std::size_t c, std::size_t base) {
  return static_cast<std::size_t>((from * 3 + to * 5 + static_cast<int>(c)) % 4) * base;
}

// Displacements leaving one element free before each block, in reverse rank order (so no
// algorithm can assume packed blocks): returns the capacity needed.
inline std::size_t gapped(const std::vector<std::size_t>& counts,
                          std::vector<std::size_t>& displs) {
  displs.assign(counts.size(), 0);
  std::size_t next = 0;
  for (std::size_t q = counts.size(); q-- > 0;) {
    displs[q] = next + 1;
    next = displs[q] + counts[q];
  }
  return next;
}

template <class Comm>
void check_alltoall(Comm& comm, int me, int p, dc::dtype t, std::size_t block, bool nonblocking) {
  const auto pp = static_cast<std::size_t>(p);
  auto in = filled(block * pp, t, 0);
  for (int q = 0; q < p; ++q) {
    for (std::size_t i = 0; i < block; ++i) put(in.data(), q * block + i, t, sent(me, q, i));
  }
  auto out = filled(block * pp, t, 0xab);
  const dc::tensor_view vin{in.data(), block * pp, t}, vout{out.data(), block * pp, t};
  if (nonblocking) {
    comm.ialltoall(vin, vout).wait();
  } else {
    comm.alltoall(vin, vout);
  }
  for (int q = 0; q < p; ++q) {
    CHECK_MESSAGE(wrong_block(out, q * block, block, t, q, me) == 0,
                  "alltoall block from rank " << q);
  }
  CHECK_MESSAGE(out.back() == 0xab, "alltoall wrote past the end");
}

template <class Comm>
void check_alltoallv(Comm& comm, int me, int p, dc::dtype t, std::size_t c, std::size_t base,
                     bool with_displs, bool nonblocking) {
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::size_t> sc(pp), rc(pp), sd, rd;
  for (int q = 0; q < p; ++q) {
    sc[static_cast<std::size_t>(q)] = ragged(me, q, c, base);
    rc[static_cast<std::size_t>(q)] = ragged(q, me, c, base);
  }
  std::size_t in_cap = std::accumulate(sc.begin(), sc.end(), std::size_t{0});
  std::size_t out_cap = std::accumulate(rc.begin(), rc.end(), std::size_t{0});
  if (with_displs) {
    in_cap = gapped(sc, sd);
    out_cap = gapped(rc, rd);
  } else {
    sd.assign(pp, 0);
    rd.assign(pp, 0);
    for (std::size_t q = 1; q < pp; ++q) {
      sd[q] = sd[q - 1] + sc[q - 1];
      rd[q] = rd[q - 1] + rc[q - 1];
    }
  }
  auto in = filled(in_cap, t, 0);
  for (int q = 0; q < p; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    for (std::size_t i = 0; i < sc[uq]; ++i) put(in.data(), sd[uq] + i, t, sent(me, q, i));
  }
  auto out = filled(out_cap, t, 0xab);
  const dc::tensor_view vin{in.data(), in_cap, t}, vout{out.data(), out_cap, t};
  const auto span_of = [](const std::vector<std::size_t>& v) {
    return dc::span<const std::size_t>(v.data(), v.size());
  };
  const dc::span<const std::size_t> none;
  if (nonblocking) {
    comm.ialltoallv(vin, span_of(sc), vout, span_of(rc), with_displs ? span_of(sd) : none,
                    with_displs ? span_of(rd) : none)
        .wait();
  } else {
    comm.alltoallv(vin, span_of(sc), vout, span_of(rc), with_displs ? span_of(sd) : none,
                   with_displs ? span_of(rd) : none);
  }
  for (int q = 0; q < p; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    CHECK_MESSAGE(wrong_block(out, rd[uq], rc[uq], t, q, me) == 0,
                  "alltoallv block from rank " << q << " (" << rc[uq] << " elements)");
  }
  CHECK_MESSAGE(out.back() == 0xab, "alltoallv wrote past the end");
}

template <class Comm>
void check_allgatherv(Comm& comm, int me, int p, dc::dtype t, std::size_t c, std::size_t base,
                      bool with_displs, bool nonblocking) {
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::size_t> counts(pp), displs;
  for (int q = 0; q < p; ++q) counts[static_cast<std::size_t>(q)] = ragged(q, 0, c, base);
  std::size_t cap = 0;
  if (with_displs) {
    cap = gapped(counts, displs);
  } else {
    displs.assign(pp, 0);
    for (std::size_t q = 1; q < pp; ++q) displs[q] = displs[q - 1] + counts[q - 1];
    cap = displs[pp - 1] + counts[pp - 1];
  }
  const std::size_t mine = counts[static_cast<std::size_t>(me)];
  auto in = filled(mine, t, 0);
  for (std::size_t i = 0; i < mine; ++i) put(in.data(), i, t, sent(me, 0, i));
  auto out = filled(cap, t, 0xab);
  const dc::tensor_view vin{in.data(), mine, t}, vout{out.data(), cap, t};
  const dc::span<const std::size_t> sc(counts.data(), counts.size());
  const dc::span<const std::size_t> sd =
      with_displs ? dc::span<const std::size_t>(displs.data(), displs.size())
                  : dc::span<const std::size_t>();
  if (nonblocking) {
    comm.iallgatherv(vin, vout, sc, sd).wait();
  } else {
    comm.allgatherv(vin, vout, sc, sd);
  }
  for (int q = 0; q < p; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    CHECK_MESSAGE(wrong_block(out, displs[uq], counts[uq], t, q, 0) == 0,
                  "allgatherv block of rank " << q << " (" << counts[uq] << " elements)");
  }
  CHECK_MESSAGE(out.back() == 0xab, "allgatherv wrote past the end");
}

template <class Comm>
void check_rooted(Comm& comm, int me, int p, dc::dtype t, std::size_t count, int root) {
  const auto pp = static_cast<std::size_t>(p);
  for (dc::reduce_op op : dc::all_reduce_ops) {
    if (count != 301 && op != dc::reduce_op::sum) continue;
    auto in = exact_buffer(me, 0, count, t, op, p);
    auto out = filled(count, t, 0xab);
    comm.reduce(dc::tensor_view{in.data(), count, t},
                me == root ? dc::tensor_view{out.data(), count, t} : dc::tensor_view{}, op, root);
    if (me == root) {
      std::string first;
      const std::size_t wrong = count_wrong(out.data(), 0, count, t, op, p, &first);
      CHECK_MESSAGE(wrong == 0, "reduce " << dc::to_string(op) << " to " << root << ": " << wrong
                                          << " wrong, " << first);
      CHECK_MESSAGE(out[count * dc::dtype_size(t)] == 0xab, "reduce wrote past the end");
    } else {
      CHECK_MESSAGE(out[0] == 0xab, "reduce wrote to a rank's output other than the root's");
    }
  }
  {
    auto in = filled(count, t, 0);
    for (std::size_t i = 0; i < count; ++i) put(in.data(), i, t, sent(me, root, i));
    auto out = filled(count * pp, t, 0xab);
    comm.igather(dc::tensor_view{in.data(), count, t},
                 me == root ? dc::tensor_view{out.data(), count * pp, t} : dc::tensor_view{}, root)
        .wait();
    if (me == root) {
      for (int q = 0; q < p; ++q) {
        CHECK_MESSAGE(wrong_block(out, static_cast<std::size_t>(q) * count, count, t, q, root) == 0,
                      "gather block of rank " << q << " at root " << root);
      }
      CHECK_MESSAGE(out.back() == 0xab, "gather wrote past the end");
    }
  }
  {
    auto in = filled(count * pp, t, 0);
    if (me == root) {
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < count; ++i) {
          put(in.data(), static_cast<std::size_t>(q) * count + i, t, sent(root, q, i));
        }
      }
    }
    auto out = filled(count, t, 0xab);
    comm.scatter(me == root ? dc::tensor_view{in.data(), count * pp, t} : dc::tensor_view{},
                 dc::tensor_view{out.data(), count, t}, root);
    CHECK_MESSAGE(wrong_block(out, 0, count, t, root, me) == 0, "scatter from " << root);
    CHECK_MESSAGE(out.back() == 0xab, "scatter wrote past the end");
  }
}

// Non-blocking messages complete in the background, the calls after them starting meanwhile:
//  * every rank isends 8 MiB to its right, then irecvs 8 MiB from its left, then waits for both
//    (torch's batch_isend_irecv), too large to leave by any transport's eager path;
//  * a receive in flight does not hold back a send behind it whose answer it waits for: every
//    rank irecvs tag 5 from its left, isends tag 6 to its right, and only once tag 6 has come
//    from its left, sends tag 5 to its right;
//  * a collective started while messages are in flight runs and completes.
template <class Comm>
void check_messages_in_flight(Comm& comm, int me, int p) {
  const int right = (me + 1) % p;
  const int left = (me + p - 1) % p;
  constexpr std::size_t big = std::size_t{2} << 20;  // floats: 8 MiB
  std::vector<float> out(big, static_cast<float>(me)), in(big, -1.0f);
  dc::work sent = comm.isend(dc::view(out.data(), out.size()), right, 4);
  dc::work got = comm.irecv(dc::view(in.data(), in.size()), left, 4);
  got.wait();
  sent.wait();
  CHECK(in.front() == static_cast<float>(left));
  CHECK(in.back() == static_cast<float>(left));

  std::int64_t answer = -1, question = -1, mine = me, sum = 0;
  dc::work asked = comm.irecv(dc::view(&answer, 1), left, 5);
  dc::work sent6 = comm.isend(dc::view(&mine, 1), right, 6);
  dc::work total = comm.iallreduce(dc::view(&mine, 1), dc::view(&sum, 1), dc::reduce_op::sum);
  comm.recv(dc::view(&question, 1), left, 6);
  comm.send(dc::view(&mine, 1), right, 5);
  asked.wait();
  sent6.wait();
  total.wait();
  CHECK(question == left);
  CHECK(answer == left);
  CHECK(sum == static_cast<std::int64_t>(p) * (p - 1) / 2);
}

// recv_any: where the backend cannot, an invalid_argument_error naming it; where it can, rank 0
// takes one message from every other rank, blocking and not, each saying its sender. An empty
// buffer is refused after the backend's ability is: so every rank learns which, posting nothing.
template <class Comm>
void check_receive_from_any(Comm& comm, int me, int p) {
  int from = -1;
  std::int64_t x = 0;
  bool can = true;
  try {
    comm.recv_any(dc::view(&x, 0), &from, 9);
    FAIL_CHECK("recv_any of an empty buffer was not refused");
  } catch (const dc::invalid_argument_error& e) {
    const std::string m = e.what();
    can = m.find("cannot receive from any rank") == std::string::npos;
    if (!can) CHECK_MESSAGE(m.find(comm.backend_name()) != std::string::npos, m);
  }
  if (!can) return;
  if (me != 0) {
    const std::int64_t mine = 1000 + me;
    comm.send(dc::view(&mine, 1), 0, 9);
    return;
  }
  std::vector<int> senders;
  for (int k = 1; k < p; ++k) {
    x = -1;
    if (k % 2) {
      comm.recv_any(dc::view(&x, 1), &from, 9);
    } else {
      comm.irecv_any(dc::view(&x, 1), &from, 9).wait();
    }
    CHECK(x == 1000 + from);
    senders.push_back(from);
  }
  std::sort(senders.begin(), senders.end());
  std::vector<int> all(static_cast<std::size_t>(p - 1));
  std::iota(all.begin(), all.end(), 1);
  CHECK(senders == all);
}

// Users' messages: a pipeline (each rank receives from the one before and sends on), an
// exchange around the ring with sendrecv, blocking and not, and arguments refused at once.
template <class Comm>
void check_messages(Comm& comm, int me, int p) {
  std::vector<std::int32_t> v(301);
  if (me > 0) {
    comm.recv(dc::view(v.data(), v.size()), me - 1, 3);
  } else {
    std::iota(v.begin(), v.end(), 0);
  }
  for (auto& x : v) x += 1;
  if (me < p - 1) comm.send(dc::view(v.data(), v.size()), me + 1, 3);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<std::int32_t>(i) + me + 1) {
      FAIL_CHECK("pipeline element " << i << ": " << v[i]);
      break;
    }
  }
  const int right = (me + 1) % p;
  const int left = (me + p - 1) % p;
  std::vector<double> out(1000, me), in(1000, -1.0);
  comm.sendrecv(dc::view(out.data(), out.size()), right, dc::view(in.data(), in.size()), left,
                (1 << 30) - 1);
  CHECK(std::all_of(in.begin(), in.end(), [&](double x) { return x == left; }));
  std::fill(in.begin(), in.end(), -1.0);
  comm.isendrecv(dc::view(out.data(), 7), left, dc::view(in.data(), 7), right).wait();
  CHECK(in[6] == right);
  CHECK(in[7] == -1.0);
  check_messages_in_flight(comm, me, p);
  check_receive_from_any(comm, me, p);
  CHECK_THROWS_AS(comm.send(dc::view(v.data(), 1), me, 0), dc::invalid_argument_error);
  CHECK_THROWS_AS(comm.recv(dc::view(v.data(), 1), right, -1), dc::invalid_argument_error);
  CHECK_THROWS_AS((void)comm.isend(dc::view(v.data(), 1), right, 1 << 30),
                  dc::invalid_argument_error);
  CHECK_THROWS_AS((void)comm.irecv(dc::view(v.data(), 1), p, 0), dc::invalid_argument_error);
}

// Every new collective, dtype and count shape on one communicator (typed or any_communicator).
template <class Comm>
void exchange_collectives(Comm& comm, int me, int p, const char* label) {
  CAPTURE(label);
  std::size_t round = 0;
  for (const dc::dtype t : exchange_dtypes) {
    CAPTURE(dc::to_string(t));
    // Blocks of 0, 1, 37 (Bruck below 256 bytes for 1-byte and 2-byte elements, pairwise above)
    // and 301 elements.
    for (std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{301}}) {
      CAPTURE(block);
      check_alltoall(comm, me, p, t, block, (block % 2) == 1);
    }
    for (std::size_t base : {std::size_t{1}, std::size_t{101}}) {
      CAPTURE(base);
      for (bool displs : {false, true}) {
        ++round;
        check_alltoallv(comm, me, p, t, round, base, displs, (round % 2) == 0);
        check_allgatherv(comm, me, p, t, round, base, displs, (round % 2) == 1);
      }
    }
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{301}}) {
      CAPTURE(count);
      check_rooted(comm, me, p, t, count,
                   static_cast<int>((round + count) % static_cast<std::size_t>(p)));
      ++round;
    }
  }
  check_messages(comm, me, p);
}

template <class B, class S>
void exchange_on(rank_context<B>& ctx, const char* label) {
  dc::communicator<B, S> comm(ctx.make(), suite_config<B>());
  exchange_collectives(comm, ctx.rank, ctx.size, label);
}

// Deterministic reduce: the bits of the rank-order fold, for every root.
template <class B>
void deterministic_reduce(rank_context<B>& ctx) {
  dc::config cfg = suite_config<B>();
  cfg.deterministic = true;
  dc::communicator<B, dc::strategy::ring> comm(ctx.make(), cfg);
  const std::size_t count = 301;
  for (int root = 0; root < ctx.size; ++root) {
    for (dc::dtype t : float_dtypes) {
      auto buf = random_buffer(ctx.rank, 0, count, t);
      comm.reduce(dc::tensor_view{buf.data(), count, t}, dc::tensor_view{buf.data(), count, t},
                  dc::reduce_op::sum, root);
      if (ctx.rank == root) {
        CHECK_MESSAGE(buf == rank_order_fold(0, count, ctx.size, t, dc::reduce_op::sum),
                      "reduce to " << root << " " << dc::to_string(t)
                                   << ": not the bits of the rank-order fold");
      }
    }
  }
}

// Counts the ranks disagree on: a mismatch_error on every rank, before any data moves.
template <class B>
void exchange_mismatches(rank_context<B>& ctx) {
  const int p = ctx.size;
  const int me = ctx.rank;
  const auto pp = static_cast<std::size_t>(p);
  {  // allgatherv: rank 0 passes other counts (the fingerprint's hash of them).
    dc::communicator<B, dc::strategy::ring> comm(ctx.make(), suite_config<B>());
    std::vector<std::size_t> counts(pp, 2);
    if (me == 0) counts[pp - 1] = 3;
    std::vector<float> in(2), out(2 * pp + 1);
    CHECK_THROWS_AS(comm.allgatherv(dc::view(in.data(), 2), dc::view(out.data(), out.size()),
                                    dc::span<const std::size_t>(counts.data(), pp)),
                    dc::mismatch_error);
  }
  {  // alltoallv: every rank sends one element more than its peers expect.
    dc::communicator<B, dc::strategy::ring> comm(ctx.make(), suite_config<B>());
    std::vector<std::size_t> sc(pp, 2), rc(pp, 1);
    sc[static_cast<std::size_t>(me)] = 1;
    std::vector<float> in(2 * pp), out(2 * pp);
    try {
      comm.alltoallv(dc::view(in.data(), in.size()), dc::span<const std::size_t>(sc.data(), pp),
                     dc::view(out.data(), out.size()), dc::span<const std::size_t>(rc.data(), pp));
      FAIL("alltoallv with counts the peers disagree on did not throw");
    } catch (const dc::mismatch_error& e) {
      // The same report on every rank: the lowest receiver's.
      CHECK_MESSAGE(std::string(e.what()).find("rank 1 sends 2 elements to rank 0, whose "
                                               "recv_counts[1] is 1") != std::string::npos,
                    e.what());
    }
    // Nothing moved: the communicator goes on.
    std::fill(sc.begin(), sc.end(), 1);
    std::fill(in.begin(), in.end(), static_cast<float>(me));
    comm.alltoallv(dc::view(in.data(), pp), dc::span<const std::size_t>(sc.data(), pp),
                   dc::view(out.data(), pp), dc::span<const std::size_t>(rc.data(), pp));
    for (std::size_t q = 0; q < pp; ++q) CHECK(out[q] == static_cast<float>(q));
  }
  {  // reduce: the ranks name different roots.
    dc::communicator<B, dc::strategy::ring> comm(ctx.make(), suite_config<B>());
    float x = 1.0f, y = 0.0f;
    CHECK_THROWS_AS(
        comm.reduce(dc::view(&x, 1), dc::view(&y, 1), dc::reduce_op::sum, me == 0 ? 0 : 1),
        dc::mismatch_error);
    // A root that is no rank: refused on every rank before anything is sent.
    CHECK_THROWS_AS(comm.gather(dc::view(&x, 1), dc::view(&y, 1), p), dc::invalid_argument_error);
    comm.reduce(dc::view(&x, 1), dc::view(&y, 1), dc::reduce_op::sum, 0);  // still usable
    if (me == 0) CHECK(y == static_cast<float>(p));
  }
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("alltoall(v), allgatherv, reduce, gather, scatter: ragged, every root", E,
                          backend_suite_exchange) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::exchange_on<B, distcomm::strategy::ring>(ctx, "point-to-point");
    if constexpr (distcomm::has_native_allreduce_v<B>) {
      backend_suite::exchange_on<B, distcomm::strategy::native>(ctx, "native");
    }
    distcomm::any_communicator any(
        distcomm::communicator<B>(ctx.make(), backend_suite::suite_config<B>()));
    backend_suite::exchange_collectives(any, ctx.rank, ctx.size, "any_communicator, automatic");
    backend_suite::deterministic_reduce(ctx);
    backend_suite::exchange_mismatches(ctx);
  });
}
