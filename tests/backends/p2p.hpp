// The point-to-point contract of backend.hpp, on the backend under test: ordered matching per peer
// and tag (receives posted before and after the sends, sizes on both sides of MPI's and UCX's
// eager limits, zero-byte messages), empty and completed requests, size mismatches, deadlines,
// and cancellation by destruction.
#pragma once

#include <algorithm>
#include <array>
#include <iterator>
#include <numeric>
#include <optional>
#include <vector>

#include "context.hpp"

namespace backend_suite {

// Tags of these tests: above every strategy's (strategy/detail.hpp), below MPI's 32767.
constexpr dc::tag_t tag_ordered = 101, tag_overtake = 102, tag_empty = 103, tag_smaller = 111,
                    tag_larger = 112, tag_larger_rndv = 113, tag_up_to = 114, tag_split = 115,
                    tag_split_smaller = 116, tag_timeout = 121, tag_cancel = 131, tag_any = 141,
                    tag_any_first = 142, tag_any_arrival = 143, tag_any_gone = 144,
                    tag_any_poll = 145;

// Message k of every rank to every other rank on tag_ordered, in int64 elements: a zero-byte one
// among them, 4,000 and 8,000 bytes (mpi sends them as several messages: backends/mpi/src/
// pieces.hpp), and 24 KB / 160 KB ones above the eager limits of Open MPI's vader and UCX.
constexpr std::size_t ordered_sizes[] = {1, 3000, 500, 0, 20000, 1000, 2};

inline std::int64_t ordered_value(int from, int to, std::size_t k, std::size_t j) {
  return ((from * 16 + to) * 8 + static_cast<std::int64_t>(k)) * 100000 +
         static_cast<std::int64_t>(j);
}

// A receive that must fail with mismatch_error naming the sender (rank 1) and `size_named`.
template <class Request>
void expect_mismatch(Request r, const std::string& size_named) {
  try {
    r.wait(soon());
    FAIL_CHECK("a receive of the wrong size completed without mismatch_error");
  } catch (const dc::mismatch_error& e) {
    const std::string m = e.what();
    CHECK_MESSAGE(m.find("rank 1") != std::string::npos, m);
    CHECK_MESSAGE(m.find(size_named) != std::string::npos, m);
  }
}

template <class B>
std::int64_t receive_one(B& b, int peer, dc::tag_t tag) {
  std::int64_t v[3] = {0, 0, 0};
  b.irecv(v, sizeof v, peer, tag).wait(soon());
  CHECK(v[0] == v[2]);
  return v[0];
}

// After rank 0 destroyed a pending 24-byte receive from rank 1 on `tag` (buffer `old`, holding
// -5s), rank 1 sends two messages there. A backend that retracts destroyed receives delivers both
// to new receives (every backend here does); one that cannot (E::cancel_retracts false) lets the
// destroyed receive take the first into the backend's own memory. Either way `old` is never
// written.
template <class E, class B>
void check_destroyed_receive(B& b, control<B>& ctl, int me, dc::tag_t tag,
                             const std::int64_t (&old)[3]) {
  ctl.barrier();  // the receive is gone before anything is sent
  if (me == 1) {
    const std::int64_t first[3] = {1000 + tag, 0, 1000 + tag};
    const std::int64_t second[3] = {2000 + tag, 0, 2000 + tag};
    auto s1 = b.isend(first, sizeof first, 0, tag);
    auto s2 = b.isend(second, sizeof second, 0, tag);
    s1.wait(soon());
    s2.wait(soon());
  } else if (me == 0) {
    if (E::cancel_retracts) CHECK(receive_one(b, 1, tag) == 1000 + tag);
    CHECK(receive_one(b, 1, tag) == 2000 + tag);
    CHECK(old[0] == -5);
    CHECK(old[1] == -5);
    CHECK(old[2] == -5);
  }
  ctl.barrier();
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("point-to-point: ordered matching per peer and tag, zero-byte messages",
                          E, backend_suite_p2p_order) {
  using namespace backend_suite;
  using B = typename E::backend;
  E::run([](rank_context<B>& ctx) {
    REQUIRE(ctx.size >= 2);
    control<B> ctl(ctx);
    B b = ctx.make();
    const int me = ctx.rank;
    const auto pp = static_cast<std::size_t>(ctx.size);
    const std::size_t n = std::size(ordered_sizes);

    {  // An empty request is complete; waiting a completed request again is a no-op.
      typename B::request empty;
      CHECK(empty.test());
      empty.wait(soon());
      empty.wait(soon());
    }

    // got[q][k]: message k from q on tag_ordered; side[q]: the two on tag_overtake.
    std::vector<std::vector<std::vector<std::int64_t>>> got(pp), sent(pp);
    std::vector<std::vector<std::int64_t>> side(pp, std::vector<std::int64_t>(2, -1));
    std::vector<std::vector<std::int64_t>> side_sent(pp);
    std::vector<typename B::request> recvs, sends, empties;
    const auto post_recv = [&](int q, std::size_t k) {
      auto& buf = got[static_cast<std::size_t>(q)][k];
      buf.assign(ordered_sizes[k], -1);
      recvs.push_back(b.irecv(buf.data(), buf.size() * 8, q, tag_ordered));
    };
    // 1. The first two receives from every peer are posted before anyone sends.
    for (int q = 0; q < ctx.size; ++q) {
      if (q == me) continue;
      got[static_cast<std::size_t>(q)].resize(n);
      for (std::size_t k = 0; k < 2; ++k) post_recv(q, k);
    }
    // 2. Everything is sent: tag_ordered, then tag_overtake, then a zero-byte tag_empty.
    for (int q = 0; q < ctx.size; ++q) {
      if (q == me) continue;
      auto& mine = sent[static_cast<std::size_t>(q)];
      for (std::size_t k = 0; k < n; ++k) {
        mine.emplace_back(ordered_sizes[k]);
        for (std::size_t j = 0; j < ordered_sizes[k]; ++j) mine[k][j] = ordered_value(me, q, k, j);
        sends.push_back(b.isend(mine[k].data(), mine[k].size() * 8, q, tag_ordered));
      }
      side_sent[static_cast<std::size_t>(q)] = {me * 10 + 1, me * 10 + 2};
      for (std::size_t k = 0; k < 2; ++k) {
        sends.push_back(b.isend(&side_sent[static_cast<std::size_t>(q)][k], 8, q, tag_overtake));
      }
      sends.push_back(b.isend(nullptr, 0, q, tag_empty));
    }
    // 3. tag_overtake is received before the rest of tag_ordered is even posted: one tag does not
    //    wait behind another. Then the remaining receives, and every wait in reverse order.
    for (int q = 0; q < ctx.size; ++q) {
      if (q == me) continue;
      for (std::size_t k = 0; k < 2; ++k) {
        auto r = b.irecv(&side[static_cast<std::size_t>(q)][k], 8, q, tag_overtake);
        r.wait(soon());
        CHECK(r.test());
        r.wait(soon());
      }
      CHECK(side[static_cast<std::size_t>(q)] == std::vector<std::int64_t>{q * 10 + 1, q * 10 + 2});
      for (std::size_t k = 2; k < n; ++k) post_recv(q, k);
      empties.push_back(b.irecv(nullptr, 0, q, tag_empty));
    }
    for (auto r = recvs.rbegin(); r != recvs.rend(); ++r) r->wait(soon());
    for (auto& r : empties) r.wait(soon());
    for (auto& s : sends) s.wait(soon());
    for (int q = 0; q < ctx.size; ++q) {
      if (q == me) continue;
      for (std::size_t k = 0; k < n; ++k) {
        const auto& buf = got[static_cast<std::size_t>(q)][k];
        std::size_t wrong = 0;
        for (std::size_t j = 0; j < buf.size(); ++j) wrong += buf[j] != ordered_value(q, me, k, j);
        CHECK_MESSAGE(wrong == 0, "message " << k << " from rank " << q << ": " << wrong
                                             << " elements out of place");
      }
    }
    ctl.barrier();
  });
}

TEST_CASE_TEMPLATE_DEFINE("point-to-point: a size mismatch is a mismatch_error, never a truncation",
                          E, backend_suite_p2p_mismatch) {
  using namespace backend_suite;
  using B = typename E::backend;
  E::run([](rank_context<B>& ctx) {
    REQUIRE(ctx.size >= 2);
    control<B> ctl(ctx);
    B b = ctx.make();
    // After each mismatch the tag goes on working: the failed message was consumed whole.
    if (ctx.rank == 1) {
      std::vector<std::int64_t> data(25000, 3);
      const std::int64_t next[3] = {77, 78, 79};  // after each mismatch
      std::vector<typename B::request> sends;
      sends.push_back(b.isend(data.data(), 16, 0, tag_smaller));
      sends.push_back(b.isend(&next[0], 8, 0, tag_smaller));
      sends.push_back(b.isend(data.data(), 40, 0, tag_larger));
      sends.push_back(b.isend(&next[1], 8, 0, tag_larger));
      sends.push_back(b.isend(data.data(), 200000, 0, tag_larger_rndv));
      sends.push_back(b.isend(&next[2], 8, 0, tag_larger_rndv));
      // Sizes mpi sends as several messages, against a receive of another such size.
      sends.push_back(b.isend(data.data(), 8000, 0, tag_split));
      sends.push_back(b.isend(&next[0], 8, 0, tag_split));
      sends.push_back(b.isend(data.data(), 4096, 0, tag_split_smaller));
      sends.push_back(b.isend(&next[1], 8, 0, tag_split_smaller));
      for (auto& s : sends) {
        try {
          s.wait(soon());
        } catch (const dc::mismatch_error&) {
          // The sender may learn of the mismatch too (the local backend fails both sides).
        }
      }
    } else if (ctx.rank == 0) {
      std::vector<unsigned char> buf(100000, 0);
      std::int64_t v = 0;
      expect_mismatch(b.irecv(buf.data(), 24, 1, tag_smaller), "16 bytes");
      b.irecv(&v, 8, 1, tag_smaller).wait(soon());
      CHECK(v == 77);
      expect_mismatch(b.irecv(buf.data(), 8, 1, tag_larger), "8 bytes");
      b.irecv(&v, 8, 1, tag_larger).wait(soon());
      CHECK(v == 78);
      expect_mismatch(b.irecv(buf.data(), buf.size(), 1, tag_larger_rndv), "100000 bytes");
      b.irecv(&v, 8, 1, tag_larger_rndv).wait(soon());
      CHECK(v == 79);
      expect_mismatch(b.irecv(buf.data(), 4096, 1, tag_split), "4096 bytes");
      b.irecv(&v, 8, 1, tag_split).wait(soon());
      CHECK(v == 77);
      expect_mismatch(b.irecv(buf.data(), 12000, 1, tag_split_smaller), "4096 bytes");
      b.irecv(&v, 8, 1, tag_split_smaller).wait(soon());
      CHECK(v == 78);
    }
    ctl.barrier();
  });
}

TEST_CASE_TEMPLATE_DEFINE(
    "point-to-point: irecv_up_to takes any size up to its capacity, and says which", E,
    backend_suite_p2p_up_to) {
  using namespace backend_suite;
  using B = typename E::backend;
  if constexpr (!dc::detail::has_irecv_up_to<B>::value) {
    MESSAGE("skipped: this backend has no irecv_up_to (the call check's messages keep one size)");
  } else {
    E::run([](rank_context<B>& ctx) {
      REQUIRE(ctx.size >= 2);
      control<B> ctl(ctx);
      B b = ctx.make();
      // Sizes below, at and above the eager limits and mpi's pieces (4,000 to 12,000 bytes go as
      // several messages), a zero-byte one, then one above the capacity (mismatch_error, consumed
      // whole: the next message still arrives).
      const std::size_t sizes[] = {5,    0,     3999,  4000,   4001,  4096,
                                   8000, 12000, 12001, 160000, 200000};
      if (ctx.rank == 1) {
        std::vector<unsigned char> data(200000);
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7);
        const std::int64_t next = 81;
        std::vector<typename B::request> sends;
        for (std::size_t n : sizes) sends.push_back(b.isend(data.data(), n, 0, tag_up_to));
        sends.push_back(b.isend(data.data(), 4000, 0, tag_up_to));
        sends.push_back(b.isend(data.data(), 8000, 0, tag_up_to));
        sends.push_back(b.isend(&next, sizeof next, 0, tag_up_to));
        for (auto& s : sends) {
          try {
            s.wait(soon());
          } catch (const dc::mismatch_error&) {
            // The local backend fails both sides of a mismatch.
          }
        }
      } else if (ctx.rank == 0) {
        const std::size_t capacity = 160000;
        std::vector<unsigned char> buf(capacity + 16, 0xee);
        for (std::size_t n : sizes) {
          CAPTURE(n);
          std::size_t got = 12345;
          auto r = b.irecv_up_to(buf.data(), capacity, &got, 1, tag_up_to);
          if (n > capacity) {
            expect_mismatch(std::move(r), std::to_string(capacity));
            continue;
          }
          r.wait(soon());
          CHECK(got == n);
          bool same = true;
          for (std::size_t i = 0; i < n; ++i) same &= buf[i] == static_cast<unsigned char>(i * 7);
          CHECK(same);
          CHECK(buf[capacity] == 0xee);  // nothing past the capacity
        }
        // A capacity of exactly one piece, then a split message above a capacity within it.
        std::size_t got = 0;
        b.irecv_up_to(buf.data(), 4000, &got, 1, tag_up_to).wait(soon());
        CHECK(got == 4000);
        expect_mismatch(b.irecv_up_to(buf.data(), 4100, &got, 1, tag_up_to), "4100");
        std::int64_t v = 0;
        b.irecv_up_to(&v, sizeof v, &got, 1, tag_up_to).wait(soon());
        CHECK(got == sizeof v);
        CHECK(v == 81);
      }
      ctl.barrier();
    });
  }
}

TEST_CASE_TEMPLATE_DEFINE(
    "point-to-point: a wait past its deadline is a timeout_error naming peer, tag and bytes", E,
    backend_suite_p2p_timeout) {
  using namespace backend_suite;
  using B = typename E::backend;
  E::run([](rank_context<B>& ctx) {
    REQUIRE(ctx.size >= 2);
    control<B> ctl(ctx);
    B b = ctx.make();
    std::int64_t buf[3] = {-5, -5, -5};
    if (ctx.rank == 0) {
      auto r = b.irecv(buf, sizeof buf, 1, tag_timeout);  // rank 1 sends nothing yet
      const auto limit = std::chrono::milliseconds(300);
      const auto t0 = dc::clock::now();
      try {
        r.wait(dc::deadline_after(limit));
        FAIL_CHECK("a receive nobody sent to completed");
      } catch (const dc::timeout_error& e) {
        const std::string m = e.what();
        CHECK_MESSAGE(m.find("rank 1") != std::string::npos, m);
        CHECK_MESSAGE(m.find("tag " + std::to_string(tag_timeout)) != std::string::npos, m);
        CHECK_MESSAGE(m.find("24 bytes") != std::string::npos, m);
      }
      const auto took = dc::clock::now() - t0;
      CHECK(took >= limit);
      CHECK(took < std::chrono::seconds(5));
    }
    // The timed-out request is gone now; whatever is sent on its tag does not reach `buf`.
    check_destroyed_receive<E>(b, ctl, ctx.rank, tag_timeout, buf);
  });
}

TEST_CASE_TEMPLATE_DEFINE("point-to-point: destroying a pending receive cancels it", E,
                          backend_suite_p2p_cancel) {
  using namespace backend_suite;
  using B = typename E::backend;
  E::run([](rank_context<B>& ctx) {
    REQUIRE(ctx.size >= 2);
    control<B> ctl(ctx);
    B b = ctx.make();
    std::int64_t buf[3] = {-5, -5, -5};
    if (ctx.rank == 0) {
      auto r = b.irecv(buf, sizeof buf, 1, tag_cancel);
      CHECK_FALSE(r.test());
    }  // destroyed while pending
    check_destroyed_receive<E>(b, ctl, ctx.rank, tag_cancel, buf);
  });
}

// Whether the backend sets aside a message that arrives before its receive (E may say not).
template <class E, class = void>
struct sets_messages_aside : std::true_type {};
template <class E>
struct sets_messages_aside<E, std::void_t<decltype(E::sets_messages_aside)>>
    : std::bool_constant<E::sets_messages_aside> {};

// Receives from any rank (irecv_any): every sender's message taken once, each saying its sender;
// a message goes to the receive posted first among those that may take it; among messages
// set aside, the one that arrived first; a pending one destroyed leaves the next message to the
// next receive; a wait past its deadline names "any rank" and the tag.
TEST_CASE_TEMPLATE_DEFINE("point-to-point: irecv_any takes the first message from any rank", E,
                          backend_suite_p2p_any) {
  using namespace backend_suite;
  using B = typename E::backend;
  if constexpr (!dc::detail::has_irecv_any<B>::value) {
    MESSAGE("skipped: this backend has no irecv_any (it matches messages per sender)");
  } else {
    E::run([](rank_context<B>& ctx) {
      REQUIRE(ctx.size >= 2);
      control<B> ctl(ctx);
      B b = ctx.make();
      const int me = ctx.rank;
      const int p = ctx.size;
      const auto message = [](int from, int k) {
        return std::array<std::int64_t, 3>{from * 10 + k, k, from * 10 + k};
      };
      // Every other rank sends one message to rank 0, before or after its receives are posted.
      if (me != 0) {
        const auto m = message(me, 0);
        b.isend(m.data(), sizeof m, 0, tag_any).wait(soon());
      } else {
        std::vector<int> from(static_cast<std::size_t>(p), -1);
        std::vector<std::array<std::int64_t, 3>> got(static_cast<std::size_t>(p));
        std::vector<typename B::request> rs;
        for (int k = 1; k < p; ++k) {
          auto& g = got[static_cast<std::size_t>(k)];
          rs.push_back(
              b.irecv_any(g.data(), sizeof g, &from[static_cast<std::size_t>(k)], tag_any));
        }
        for (auto& r : rs) r.wait(soon());
        std::vector<int> senders;
        for (int k = 1; k < p; ++k) {
          const int q = from[static_cast<std::size_t>(k)];
          senders.push_back(q);
          CHECK(got[static_cast<std::size_t>(k)] == message(q, 0));
        }
        std::sort(senders.begin(), senders.end());
        std::vector<int> all(static_cast<std::size_t>(p - 1));
        std::iota(all.begin(), all.end(), 1);
        CHECK(senders == all);
      }
      ctl.barrier();

      // Rank 1 sends messages 1, 2, 3, 4; rank 0 posts a receive from rank 1, then one from any
      // rank, then one from any rank, then one from rank 1: they take 1, 2, 3, 4 in that order.
      if (me == 1) {
        for (int k = 1; k <= 4; ++k) {
          const auto m = message(1, k);
          b.isend(m.data(), sizeof m, 0, tag_any_first).wait(soon());
        }
      } else if (me == 0) {
        std::array<std::array<std::int64_t, 3>, 4> got{};
        int a = -1, c = -1;
        auto r1 = b.irecv(got[0].data(), sizeof got[0], 1, tag_any_first);
        auto r2 = b.irecv_any(got[1].data(), sizeof got[1], &a, tag_any_first);
        auto r3 = b.irecv_any(got[2].data(), sizeof got[2], &c, tag_any_first);
        auto r4 = b.irecv(got[3].data(), sizeof got[3], 1, tag_any_first);
        r4.wait(soon());
        r3.wait(soon());
        r2.wait(soon());
        r1.wait(soon());
        for (int k = 0; k < 4; ++k) CHECK(got[static_cast<std::size_t>(k)] == message(1, k + 1));
        CHECK(a == 1);
        CHECK(c == 1);
      }
      ctl.barrier();

      // The last rank's message arrives, then rank 1's (rank 0 polls its backend between): a
      // receive from any rank posted after both takes the last rank's. Where messages wait at
      // their senders, it takes either.
      constexpr bool in_arrival_order = sets_messages_aside<E>::value;
      // (The local backend completes a send once it is received: waited for at the end.)
      std::int64_t poll_buf = 0;
      std::optional<typename B::request> poll, sent;
      const auto m5 = message(me, 5);
      if (me == 0) poll.emplace(b.irecv(&poll_buf, sizeof poll_buf, 1, tag_any_poll));
      for (const int sender : p > 2 ? std::vector<int>{p - 1, 1} : std::vector<int>{1}) {
        if (me == sender) sent.emplace(b.isend(m5.data(), sizeof m5, 0, tag_any_arrival));
        ctl.barrier();
        if (me == 0) CHECK_FALSE(poll->test());  // reads what arrived
        ctl.barrier();
      }
      if (me == 0) {
        poll.reset();
        std::array<std::int64_t, 3> got{};
        int q = -1;
        b.irecv_any(got.data(), sizeof got, &q, tag_any_arrival).wait(soon());
        const int first = q;
        if (in_arrival_order) CHECK(q == p - 1);
        CHECK(got == message(q, 5));
        if (p > 2) {
          b.irecv_any(got.data(), sizeof got, &q, tag_any_arrival).wait(soon());
          CHECK(q == (first == 1 ? p - 1 : 1));
          CHECK(got == message(q, 5));
        }
      }
      if (sent) sent->wait(soon());
      ctl.barrier();

      // A receive from any rank past its deadline names any rank and the tag; destroyed, it
      // leaves the next message to the next receive.
      if (me == 0) {
        std::array<std::int64_t, 3> old{-5, -5, -5};
        int q = -7;
        {
          auto r = b.irecv_any(old.data(), sizeof old, &q, tag_any_gone);
          try {
            r.wait(dc::deadline_after(std::chrono::milliseconds(200)));
            FAIL_CHECK("a receive from any rank completed with nothing sent");
          } catch (const dc::timeout_error& e) {
            const std::string m = e.what();
            CHECK_MESSAGE(m.find("any rank") != std::string::npos, m);
            CHECK_MESSAGE(m.find("tag " + std::to_string(tag_any_gone)) != std::string::npos, m);
          }
        }  // destroyed: retracted
        ctl.barrier();
        std::array<std::int64_t, 3> got{};
        b.irecv(got.data(), sizeof got, 1, tag_any_gone).wait(soon());
        CHECK(got == message(1, 6));
        CHECK(old == std::array<std::int64_t, 3>{-5, -5, -5});
        CHECK(q == -7);
      } else {
        ctl.barrier();
        if (me == 1) {
          const auto m = message(1, 6);
          b.isend(m.data(), sizeof m, 0, tag_any_gone).wait(soon());
        }
      }
      ctl.barrier();
    });
  }
}
