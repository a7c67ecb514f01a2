// distcomm-trace's verdict on dumps written here (the staged runs of tests/trace check the same
// verdicts on real jobs, where the order of events is up to the transport): a rank that came
// late, one that never came, a mismatched call, and a rank stopped just after a collective whose
// last messages of it were still inside its process, so that one rank timed out in that
// collective while the others timed out in the next, waiting for the stopped rank there.
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "verdict.hpp"

namespace {

using distcomm::trace_tool::analyse;
using distcomm::trace_tool::dump;
using json = nlohmann::json;

constexpr std::int64_t second = 1000000;

json entry(std::uint64_t seq, const std::string& what, const std::string& state,
           std::int64_t started, std::int64_t ended, const std::string& error = "",
           const std::string& kind = "timeout") {
  json e = {{"seq", seq},  {"collective", what}, {"dtype", "f32"},        {"count", 4096},
            {"op", "sum"}, {"state", state},     {"started_us", started}, {"ended_us", ended}};
  if (what == "broadcast") {
    e.erase("op");
    e["dtype"] = "i32";
    e["count"] = 16;
    e["root"] = 0;
  }
  if (!error.empty()) {
    e["error"] = error;
    e["error_kind"] = kind;
  }
  return e;
}

dump rank_dump(int rank, std::int64_t dumped, const std::vector<json>& entries) {
  dump d;
  d.rank = rank;
  d.pid = 100 + rank;
  d.reason = "a collective failed";
  d.dumped_us = dumped;
  d.communicators = json::array({{{"name", "c0"},
                                  {"backend", "gloo"},
                                  {"strategy", "auto"},
                                  {"ranks", {0, 1, 2, 3}},
                                  {"entries", entries}}});
  return d;
}

// Collectives #0-#1 completed alike by every rank, from t = 0.
std::vector<json> alike() {
  return {entry(0, "allreduce", "completed", 0, 10), entry(1, "broadcast", "completed", 20, 30)};
}

bool says(const std::string& report, const std::string& pattern) {
  return std::regex_search(report, std::regex(pattern));
}

}  // namespace

TEST_CASE("a rank stopped just after a collective is named where it came late") {
  // Rank 2 completed #2 and stopped with its last message of #2 unsent: rank 0 timed out in #2;
  // ranks 1 and 3 went on to #3 and timed out there; rank 2, continued, entered #3 5 s late.
  const std::string why = "timed out waiting for rank 2";
  std::vector<dump> dumps;
  for (int r = 0; r < 4; ++r) {
    std::vector<json> e = alike();
    if (r == 0) {
      e.push_back(entry(2, "broadcast", "failed", 100, 100 + 5 * second, why));
    } else {
      e.push_back(entry(2, "broadcast", "completed", 100, 110));
      const std::int64_t start = r == 2 ? 120 + 5 * second : 120;
      e.push_back(entry(3, "allreduce", "failed", start, 130 + 5 * second, why));
    }
    dumps.push_back(rank_dump(r, 200 + 5 * second, e));
  }
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report, "diverged at collective #2"));
  CHECK(says(report,
             "verdict: rank 2 came late to #3 \\(5\\.0 s after the first rank\\). the "
             "others timed out waiting \\(DISTCOMM_TIMEOUT\\), rank 0 in #2"));
}

TEST_CASE("the same, where the waiting rank learnt it from the first to time out") {
  // As above, but rank 3 gave up on rank 2 in #3 first (round 0 of the exchange waits no
  // stagger) and its abort ended rank 0's wait in #2 as a peer_lost_error.
  std::vector<dump> dumps;
  for (int r = 0; r < 4; ++r) {
    std::vector<json> e = alike();
    if (r == 0) {
      e.push_back(entry(2, "broadcast", "failed", 100, 100 + 5 * second,
                        "rank 3 aborted: rank 2 did not start the collective", "peer_lost"));
    } else {
      e.push_back(entry(2, "broadcast", "completed", 100, 110));
      const std::int64_t start = r == 2 ? 120 + 5 * second : 120;
      e.push_back(entry(3, "allreduce", "failed", start, 130 + 5 * second, "timed out"));
    }
    dumps.push_back(rank_dump(r, 200 + 5 * second, e));
  }
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report,
             "verdict: rank 2 came late to #3 \\(5\\.0 s after the first rank\\). the "
             "others timed out waiting \\(DISTCOMM_TIMEOUT\\), rank 0 in #2"));
  CHECK_FALSE(says(report, "rank 0 failed in #2"));
}

TEST_CASE("a rank killed just after a collective, its last message lost, is named") {
  // Rank 2 completed #2 and was killed with its last message to rank 0 unsent: ranks 1 and 3
  // completed #2, rank 0 lost rank 2 there; rank 2 left no dump.
  std::vector<dump> dumps;
  for (int r : {0, 1, 3}) {
    std::vector<json> e = alike();
    e.push_back(r == 0 ? entry(2, "broadcast", "failed", 100, 110, "rank 2 closed the connection",
                               "peer_lost")
                       : entry(2, "broadcast", "completed", 100, 110));
    dumps.push_back(rank_dump(r, 200, e));
  }
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report, "verdict: rank 2 left no record, and the others lost it in #2"));
}

TEST_CASE("a rank that failed where the others completed, with nobody late, is named") {
  std::vector<dump> dumps;
  for (int r = 0; r < 4; ++r) {
    std::vector<json> e = alike();
    e.push_back(r == 1 ? entry(2, "broadcast", "failed", 100, 100 + second, "broken")
                       : entry(2, "broadcast", "completed", 100, 110));
    dumps.push_back(rank_dump(r, 200 + second, e));
  }
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report, "verdict: rank 1 failed in #2, which ranks 0, 2 and 3 completed"));
  CHECK_FALSE(says(report, "every rank failed"));
}

TEST_CASE("a rank that entered the collective late is named") {
  std::vector<dump> dumps;
  for (int r = 0; r < 4; ++r) {
    std::vector<json> e = alike();
    const std::int64_t start = r == 3 ? 100 + 3 * second : 100;
    e.push_back(entry(2, "allreduce", "failed", start, 100 + 3 * second, "timed out"));
    dumps.push_back(rank_dump(r, 200 + 3 * second, e));
  }
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report, "verdict: rank 3 came late to #2 \\(3\\.0 s after the first rank\\)"));
}

TEST_CASE("a rank that never reached the collective, and a mismatched call, are named") {
  std::vector<dump> missing, mismatched;
  for (int r = 0; r < 4; ++r) {
    std::vector<json> e = alike();
    if (r != 2) e.push_back(entry(2, "allreduce", "started", 100, 0));
    missing.push_back(rank_dump(r, 200, e));
    std::vector<json> m = alike();
    m.push_back(entry(2, r == 2 ? "broadcast" : "allreduce", "started", 100, 0));
    mismatched.push_back(rank_dump(r, 200, m));
  }
  const std::string absent = analyse(missing);
  INFO(absent);
  CHECK(says(absent, "verdict: rank 2 never reached #2"));
  const std::string odd = analyse(mismatched);
  INFO(odd);
  CHECK(says(odd, "verdict: mismatched call at #2: rank 2 called broadcast"));
}

TEST_CASE("dumps that agree give no divergence") {
  std::vector<dump> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(rank_dump(r, 200, alike()));
  const std::string report = analyse(dumps);
  INFO(report);
  CHECK(says(report, "completed collectives #0-#1 alike"));
  CHECK(says(report, "verdict: no divergence recorded"));
}
