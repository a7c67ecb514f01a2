// Ranks that disagree on a call: every rank gets a mismatch_error naming the field that differs
// and both values, at once (not at the deadline), before any data moved; the communicator then
// goes on. A rank whose communicator is gone is reported as having left, with its count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "context.hpp"

namespace backend_suite {

// Far beyond the 2 s within which every rank must have its error: a mismatch reported by a
// deadline would take this long.
constexpr double mismatch_timeout_s = 20.0;

template <class B>
dc::config mismatch_config() {
  dc::config c = suite_config<B>();
  c.timeout = std::chrono::duration<double>(mismatch_timeout_s);
  c.mismatch_check = true;
  return c;
}

// Runs `call` on this rank and returns the message of the mismatch_error it must raise (empty,
// and a failed check, when it raised none or another error), checking it came within 2 s.
template <class F>
std::string expect_call_mismatch(const char* label, F&& call) {
  const std::string label_text = label;
  CAPTURE(label_text);
  const auto t0 = dc::clock::now();
  std::string m;
  try {
    call();
    FAIL_CHECK("no mismatch_error");
  } catch (const dc::mismatch_error& e) {
    m = e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("another error than mismatch_error: " << std::string(e.what()));
  }
  const double took = std::chrono::duration<double>(dc::clock::now() - t0).count();
  CHECK_MESSAGE(took < 2.0, label << " took " << took << " s");
  return m;
}

inline void check_has(const std::string& m, const std::string& part) {
  CHECK_MESSAGE(m.find(part) != std::string::npos,
                "'" << m << "' does not mention '" << part << "'");
}

// The odd rank broadcasts `count` elements while the others allreduce them: every rank names
// both calls, its buffer as it was.
template <class B>
void broadcast_against_allreduce(dc::communicator<B>& comm, bool odd, std::size_t count) {
  std::vector<float> v(count, 3.0f);
  const std::string m = expect_call_mismatch("kind", [&] {
    if (odd) {
      comm.broadcast(dc::view(v), 0);
    } else {
      comm.allreduce(dc::view(v));
    }
  });
  check_has(m, "calls allreduce");
  check_has(m, "calls broadcast");
  CHECK(v == std::vector<float>(count, 3.0f));
}

// The odd rank out is rank 1; at 3 ranks ranks 0 and 2 agree.
template <class B>
void mismatched_calls(rank_context<B>& ctx) {
  const int me = ctx.rank;
  const bool odd = me == 1;
  dc::communicator<B> comm(ctx.make(), mismatch_config<B>());

  // Same bytes, another dtype: f32 against i32.
  {
    std::vector<float> f(8, 1.5f);
    std::vector<std::int32_t> i(8, 7);
    const std::string m = expect_call_mismatch("dtype", [&] {
      if (odd) {
        comm.allreduce(dc::view(i));
      } else {
        comm.allreduce(dc::view(f));
      }
    });
    check_has(m, "dtype");
    check_has(m, "f32");
    check_has(m, "i32");
    check_has(m, "rank 1");
    CHECK_MESSAGE((f == std::vector<float>(8, 1.5f) && i == std::vector<std::int32_t>(8, 7)),
                  "the data moved");
  }
  // Another op: sum against max.
  {
    std::vector<float> v(8, 2.0f);
    const std::string m = expect_call_mismatch(
        "op", [&] { comm.allreduce(dc::view(v), odd ? dc::reduce_op::max : dc::reduce_op::sum); });
    check_has(m, "reduce op");
    check_has(m, "sum");
    check_has(m, "max");
    CHECK(v == std::vector<float>(8, 2.0f));
  }
  // Another root, small and large buffers.
  for (std::size_t count : {std::size_t{4}, std::size_t{300000}}) {
    std::vector<float> v(count, static_cast<float>(me));
    const std::string m =
        expect_call_mismatch("root", [&] { comm.broadcast(dc::view(v), odd ? 1 : 0); });
    check_has(m, "root");
    check_has(m, "root 0");
    check_has(m, "root 1");
    CHECK(v == std::vector<float>(count, static_cast<float>(me)));
  }
  // Another collective of the same size.
  broadcast_against_allreduce(comm, odd, 1024);
  // Counts one apart, above every eager limit.
  {
    std::vector<float> v(odd ? 300008 : 300007, 1.0f);
    const std::string m = expect_call_mismatch("count", [&] { comm.allreduce(dc::view(v)); });
    check_has(m, "element count");
    check_has(m, "300007");
    check_has(m, "300008");
  }
  // A grouped allreduce of the same tensors in another order.
  {
    std::vector<float> a(10, 1.0f);
    std::vector<float> b(20, 1.0f);
    std::vector<std::int32_t> c(30, 1);
    std::vector<dc::tensor_view> ts = {dc::view(a), dc::view(b), dc::view(c)};
    if (odd) std::swap(ts[0], ts[2]);
    const std::string m = expect_call_mismatch(
        "grouped order", [&] { comm.allreduce(dc::span<const dc::tensor_view>(ts)); });
    check_has(m, "tensors");
    check_has(m, "order");
  }
  // Small allreduces ride in the agreement's own messages (check/carried.hpp): counts one apart
  // on either side of the largest carried size, one rank carrying its data and the other not,
  // and an allreduce carried against a barrier. The data stays as it was.
  for (std::size_t count :
       {std::size_t{2},
        std::max<std::size_t>(dc::check::carried_limit<B>(ctx.size), 64) / sizeof(float)}) {
    std::vector<float> v(odd ? count + 1 : count, 3.0f);
    const std::string m =
        expect_call_mismatch("carried count", [&] { comm.allreduce(dc::view(v)); });
    check_has(m, "element count");
    check_has(m, std::to_string(count + 1));
    CHECK(v == std::vector<float>(odd ? count + 1 : count, 3.0f));
  }
  {
    std::vector<double> v(3, 0.5);
    const std::string m = expect_call_mismatch("carried kind", [&] {
      if (odd) {
        comm.barrier();
      } else {
        comm.allreduce(dc::view(v), dc::reduce_op::avg);
      }
    });
    check_has(m, "calls allreduce");
    check_has(m, "calls barrier");
    CHECK(v == std::vector<double>(3, 0.5));
  }
  // The communicator is still usable, and the next collectives pair up as usual.
  const std::int64_t n = ctx.size;
  const auto usable = [&](dc::communicator<B>& c) {
    for (std::size_t count : {std::size_t{5}, std::size_t{512}, std::size_t{512}, std::size_t{5}}) {
      std::vector<std::int64_t> ok(count, me + 1);
      c.allreduce(dc::view(ok));
      CHECK(ok == std::vector<std::int64_t>(count, n * (n + 1) / 2));
    }
    c.barrier();
  };
  usable(comm);

  // A collective that moves data against one that moves none (a backend that stages data for
  // its collectives must not lose count of where it stages it: the next calls check it). 4 KiB:
  // the backend's native allreduce where it has one (suite_config's table).
  {
    dc::communicator<B> fresh(ctx.make(), mismatch_config<B>());
    std::vector<float> v(1024, 1.0f);
    const std::string m = expect_call_mismatch("kind", [&] {
      if (odd) {
        fresh.barrier();
      } else {
        fresh.allreduce(dc::view(v));
      }
    });
    check_has(m, "calls allreduce");
    check_has(m, "calls barrier");
    usable(fresh);
  }

  // Settings that choose the algorithm differ (a rank with another DISTCOMM_SEGMENT_SIZE).
  dc::config other = mismatch_config<B>();
  if (odd) other.segment_bytes = 512;
  dc::communicator<B> comm2(ctx.make(), other);
  std::vector<float> v(4096, 1.0f);
  const std::string m = expect_call_mismatch("settings", [&] { comm2.allreduce(dc::view(v)); });
  check_has(m, "DISTCOMM_SEGMENT_SIZE");
  check_has(m, "256");
  check_has(m, "512");
}

// Above the carried size, on backends whose agreement is an exchange of their own messages, each
// strategy's call agrees while its first messages travel (check/gate.hpp): a mismatch is found
// there, the early messages are drained, every rank raises the same error with its buffers as
// they were, and the next large calls of the same strategy pair up with the right data.
template <class B>
void mismatch_per_strategy(rank_context<B>& ctx) {
  const int me = ctx.rank;
  const bool odd = me == 1;
  const auto n = static_cast<float>(ctx.size);
  std::vector<std::string> tables = {"ring:0-max", "tree:0-max", "rd:0-max", "ps:0-max"};
  if constexpr (dc::has_native_allreduce_v<B>) tables.push_back("native:0-max");
  // Above every backend's carried budget (64 KiB at two ranks).
  const std::size_t count = 40000;
  for (const std::string& table : tables) {
    CAPTURE(table);
    dc::config c = mismatch_config<B>();
    c.algo = dc::algo_table::parse(table, "test table");
    dc::communicator<B> comm(ctx.make(), c);
    const std::uint64_t overlapped = comm.overlapped_agreements();
    {
      std::vector<float> v(odd ? count + 1 : count, 2.0f);
      const std::string m = expect_call_mismatch("count", [&] { comm.allreduce(dc::view(v)); });
      check_has(m, "element count");
      check_has(m, std::to_string(count + 1));
      CHECK(v == std::vector<float>(odd ? count + 1 : count, 2.0f));
    }
    broadcast_against_allreduce(comm, odd, count);
    if constexpr (dc::check::gates<B>) CHECK(comm.overlapped_agreements() == overlapped + 2);
    for (int round = 0; round < 2; ++round) {
      std::vector<float> ok(count, 1.0f);
      comm.allreduce(dc::view(ok));
      CHECK(ok == std::vector<float>(count, n));
    }
  }
}

// Rank 1 makes two collectives and destroys its communicator; the others call a third, of
// `count` floats (above the carried size: it agrees while its first messages travel, and those
// to rank 1 are not waited for). Where a message nobody receives is an error (MPI, backend.hpp),
// no notice is sent: the others name rank 1 at their deadline instead, saying it may have left.
template <class B>
void departed_rank(rank_context<B>& ctx, std::size_t count = 16) {
  const int me = ctx.rank;
  B backend = ctx.make();
  const bool notices = dc::detail::unreceived_messages_ok_at(backend);  // a plugin says at run time
  // A send nobody takes must not outlive an MPI communicator: the large call only where the
  // departure is told.
  if (count > 16 && !notices) return;
  dc::config cfg = mismatch_config<B>();
  if (!notices) cfg.timeout = std::chrono::seconds(2);
  if (me == 1) {
    dc::communicator<B> comm(std::move(backend), cfg);
    std::vector<float> v(16, 1.0f);
    comm.allreduce(dc::view(v));
    comm.barrier();
    return;  // leaves after 2 collectives
  }
  dc::communicator<B> comm(std::move(backend), cfg);
  std::vector<float> v(16, 1.0f);
  comm.allreduce(dc::view(v));
  comm.barrier();
  v.assign(count, 1.0f);
  if (notices) {
    const std::string m = expect_call_mismatch("left", [&] { comm.allreduce(dc::view(v)); });
    check_has(m, "rank 1 has left the job after 2 collectives");
    check_has(m, "is in its 3rd");
  } else {
    std::string m;
    CHECK_THROWS_AS(
        [&] {
          try {
            comm.allreduce(dc::view(v));
          } catch (const dc::timeout_error& e) {
            m = e.what();
            throw;
          }
        }(),
        dc::timeout_error);
    check_has(m, "rank 1 did not start the 3rd collective");
    check_has(m, "have left the job");
  }
}

}  // namespace backend_suite

TEST_CASE_TEMPLATE_DEFINE("mismatched calls: mismatch_error on every rank, naming the field", E,
                          backend_suite_mismatch) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::mismatched_calls(ctx); });
}

TEST_CASE_TEMPLATE_DEFINE("mismatched calls: a rank whose communicator is gone has left the job", E,
                          backend_suite_departed) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) {
    backend_suite::departed_rank(ctx);
    backend_suite::departed_rank(ctx, 40000);
  });
}

TEST_CASE_TEMPLATE_DEFINE(
    "mismatched calls: each strategy finds it while its first messages travel", E,
    backend_suite_strategy_mismatch) {
  using B = typename E::backend;
  E::run([](backend_suite::rank_context<B>& ctx) { backend_suite::mismatch_per_strategy(ctx); });
}
