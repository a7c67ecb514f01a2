// The engine's negotiation as a pure function (the plan every rank computes from the same
// reports), the stall warning's text, and the timeline: a Chrome trace that parses and holds
// every phase. The engine across backends is in the backend suite (tests/backends/engine.hpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/backends/local.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/engine/negotiation.hpp"
#include "distcomm/log.hpp"
#include "distcomm/strategy/ring.hpp"
#include "distcomm/trace/timeline.hpp"

using namespace distcomm;
using namespace distcomm::engine_detail;
using namespace std::chrono_literals;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

tensor_request ar(const std::string& name, std::uint64_t count = 4, int op = 0,
                  dtype t = dtype::f32) {
  return {name, tensor_kind::allreduce, t, count, op, -1};
}

rank_report report(std::vector<tensor_request> reqs, bool joined = false, bool blocked = false) {
  rank_report r;
  r.joined = joined;
  r.blocked = blocked;
  for (auto& q : reqs) r.pending.push_back({q, 0.1});
  return r;
}

std::vector<std::string> names_of(const plan& p, const response_cache& c) {
  std::vector<std::string> out;
  for (int i : p.ready) out.push_back(c.at(i).name);
  return out;
}

}  // namespace

TEST_CASE("negotiation: describe_ranks") {
  CHECK(describe_ranks({}) == "no rank");
  CHECK(describe_ranks({3}) == "rank 3");
  CHECK(describe_ranks({0, 2}) == "ranks 0, 2");
  CHECK(describe_ranks({0, 1}) == "ranks 0, 1");
  CHECK(describe_ranks({0, 1, 2, 3, 7}) == "ranks 0-3, 7");
}

TEST_CASE("negotiation: a report survives the wire; garbage is named") {
  rank_report r = report({ar("layer1.weight", 1000, 4, dtype::bf16), ar("b", 1)}, true, true);
  r.shutdown = true;
  const auto bytes = serialize(r);
  const rank_report back = deserialize(bytes.data(), bytes.size(), 2);
  CHECK(back.joined);
  CHECK(back.shutdown);
  CHECK(back.blocked);
  REQUIRE(back.pending.size() == 2);
  CHECK(back.pending[0].request.name == "layer1.weight");
  CHECK(back.pending[0].request.same_call(r.pending[0].request));
  CHECK_THROWS_WITH_AS(deserialize(bytes.data(), bytes.size() - 3, 2),
                       doctest::Contains("report of rank 2 is cut short"), mismatch_error);
  const unsigned char junk[] = {1, 2, 3, 4, 5};
  CHECK_THROWS_AS(deserialize(junk, sizeof junk, 1), mismatch_error);
}

TEST_CASE("negotiation: ready when every rank has it, in the lowest rank's order, cached") {
  response_cache cache;
  const auto p =
      negotiate({report({ar("b"), ar("a"), ar("c")}), report({ar("a"), ar("b")})}, cache, {});
  CHECK(names_of(p, cache) == std::vector<std::string>{"b", "a"});  // rank 0's order; c waits
  CHECK(p.failures.empty());
  CHECK(cache.find(ar("a")) >= 0);
  CHECK(cache.find(ar("c")) < 0);
  CHECK(cache.find(ar("a", 5)) < 0);  // another count is another call
  // Same reports, same plan: the cache numbers agree on every rank.
  response_cache other;
  const auto q =
      negotiate({report({ar("b"), ar("a"), ar("c")}), report({ar("a"), ar("b")})}, other, {});
  CHECK(p.ready == q.ready);
}

TEST_CASE("negotiation: another dtype, count or op is a mismatch naming the field and ranks") {
  response_cache cache;
  auto p = negotiate({report({ar("w", 4)}), report({ar("w", 5)}), report({ar("w", 4)})}, cache, {});
  REQUIRE(p.failures.size() == 1);
  CHECK(p.failures[0].names == std::vector<std::string>{"w"});
  CHECK(p.failures[0].message ==
        "engine: ranks submitted tensor 'w' with different calls, count: 4 on ranks 0, 2; 5 on "
        "rank 1");
  p = negotiate({report({ar("w", 4, 0, dtype::f32)}), report({ar("w", 4, 0, dtype::f16)})}, cache,
                {});
  REQUIRE(p.failures.size() == 1);
  CHECK_HAS(p.failures[0].message, "dtype: f16 on rank 1; f32 on rank 0");
  p = negotiate({report({ar("w", 4, 0)}), report({ar("w", 4, 3)})}, cache, {});
  REQUIRE(p.failures.size() == 1);
  CHECK_HAS(p.failures[0].message, "op: ");
  CHECK(p.ready.empty());
}

TEST_CASE("negotiation: every rank blocked with nothing ready names who lacks what") {
  response_cache cache;
  // Not blocked everywhere: just not ready yet.
  auto p = negotiate({report({ar("x")}, false, true), report({ar("a")}, false, false)}, cache, {});
  CHECK(p.failures.empty());
  p = negotiate({report({ar("x")}, false, true), report({ar("a")}, false, true)}, cache, {});
  REQUIRE(p.failures.size() == 1);
  CHECK(p.failures[0].everything);
  CHECK(p.failures[0].message ==
        "engine: every rank waits, and no tensor is pending on every rank: 'x' was submitted by "
        "rank 0, never by rank 1; 'a' was submitted by rank 1, never by rank 0 (ranks must submit "
        "the same tensor names; one that runs out of data calls join())");
}

TEST_CASE("negotiation: join, a submission after join, shutdown, timeout and stalls") {
  response_cache cache;
  // Rank 1 joined: what rank 0 and 2 both have is ready without it.
  auto p = negotiate({report({ar("g")}), report({}, true), report({ar("g")})}, cache, {});
  CHECK(names_of(p, cache) == std::vector<std::string>{"g"});
  CHECK(p.joined == std::vector<int>{1});
  CHECK_FALSE(p.all_joined);
  p = negotiate({report({}, true), report({}, true)}, cache, {});
  CHECK(p.all_joined);
  p = negotiate({report({ar("late")}, true), report({ar("late")})}, cache, {});
  REQUIRE(p.failures.size() == 1);
  CHECK_HAS(p.failures[0].message, "'late' was submitted by rank 0 after join()");

  rank_report leaving = report({});
  leaving.shutdown = true;
  p = negotiate({report({ar("g")}), leaving}, cache, {});
  CHECK(p.shutdown_rank == 1);
  REQUIRE(p.failures.size() == 1);
  CHECK_HAS(p.failures[0].message,
            "rank 1 shut its engine down (destroyed it) while tensors were "
            "pending: 'g' on rank 0;");

  rank_report old = report({ar("slow")});
  old.pending[0].age_s = 75;
  negotiation_settings s;
  s.stall_s = 60;
  s.timeout_s = 300;
  p = negotiate({old, report({}), report({})}, cache, s);
  CHECK(p.failures.empty());
  REQUIRE(p.stalls.size() == 1);
  CHECK(p.stalls[0].name == "slow");
  CHECK(p.stalls[0].missing == std::vector<int>{1, 2});
  old.pending[0].age_s = 301;
  p = negotiate({old, report({})}, cache, s);
  REQUIRE(p.failures.size() == 1);
  CHECK(p.failures[0].what == failure::kind::timeout);
  CHECK_HAS(p.failures[0].message, "'slow' was submitted by rank 0 but not by rank 1 within 300 s");
}

namespace {
std::mutex log_mutex;
std::vector<std::string> logged;
void capture(void*, log_level, const char* line) {
  std::lock_guard<std::mutex> lock(log_mutex);
  logged.emplace_back(line);
}

// Runs `rank_body` on a local world of `p` ranks with DISTCOMM_STALL_WARNING 0.3 s and the log
// captured; true when a line holds every one of `parts`.
template <class Body>
bool logs_stall(int p, Body&& rank_body, std::initializer_list<const char*> parts) {
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    logged.clear();
  }
  local_world world(p);
  set_log_sink(&capture, nullptr);
  world.run([&](local_backend b) {
    config c;
    c.timeout = 30s;
    c.stall_warning = std::chrono::duration<double>(0.3);
    rank_body(std::move(b), c);
  });
  set_log_sink(nullptr, nullptr);
  std::lock_guard<std::mutex> lock(log_mutex);
  for (const auto& l : logged) {
    bool all = true;
    for (const char* part : parts) all = all && l.find(part) != std::string::npos;
    if (all) return true;
  }
  MESSAGE(logged.size() << " lines logged, none the stall warning");
  return false;
}
}  // namespace

TEST_CASE("engine: the stall warning names the tensor and the ranks that did not submit it") {
  CHECK(logs_stall(3,
                   [](local_backend b, const config& c) {
                     any_communicator comm(
                         communicator<local_backend, strategy::ring>(std::move(b), c));
                     engine eng(comm, c);
                     std::vector<float> v(4, 1.0f);
                     if (comm.rank() != 0)
                       std::this_thread::sleep_for(1s);  // rank 0 waits for the others
                     eng.allreduce_async("slow.weight", view(v), reduce_op::sum).wait();
                     CHECK(v[0] == 3.0f);
                   },
                   {"stall: rank 0 waits in the engine for tensors other ranks have not submitted: "
                    "'slow.weight' (pending ",
                    "not yet submitted by ranks 1, 2)"}));
}

TEST_CASE("engine: DISTCOMM_TIMELINE writes a Chrome trace with every phase") {
  const std::string pattern = "test_engine_timeline_%r.json";
  {
    local_world world(2);
    world.run([&](local_backend b) {
      config c;
      c.timeout = 30s;
      c.timeline = pattern;
      any_communicator comm(communicator<local_backend, strategy::ring>(std::move(b), c));
      engine eng(comm, c);
      std::vector<float> a(1000, 1.0f), w(10, 2.0f);
      for (int step = 0; step < 3; ++step) {
        auto x = eng.allreduce_async("fc.weight", view(a), reduce_op::sum);
        auto y = eng.allreduce_async("fc.bias", view(w), reduce_op::sum);
        x.wait();
        y.wait();
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    const std::string path = "test_engine_timeline_" + std::to_string(r) + ".json";
    CAPTURE(path);
    std::ifstream in(path);
    REQUIRE(in.good());
    const auto doc = nlohmann::json::parse(in);  // throws (fails the test) if not JSON
    std::set<std::string> names;
    std::set<std::string> tensors;
    for (const auto& e : doc.at("traceEvents")) {
      CHECK(e.at("pid") == r);
      names.insert(e.at("name").get<std::string>());
      if (e.contains("args") && e["args"].contains("tensors") && e["args"]["tensors"].is_array()) {
        for (const auto& t : e["args"]["tensors"]) tensors.insert(t.get<std::string>());
      }
    }
    for (const char* phase : {"negotiate", "allreduce", "grouped allreduce", "fc.weight", "fc.bias",
                              "pack", "unpack", "thread_name", "process_name"}) {
      CHECK_MESSAGE(names.count(phase) == 1, "no '" << phase << "' event");
    }
    CHECK(tensors.count("fc.weight") == 1);
    std::remove(path.c_str());
  }
}

TEST_CASE("stall warning: a rank waiting in a collective names the rank that has not entered it") {
  CHECK(logs_stall(
      2,
      [](local_backend b, const config& c) {
        communicator<local_backend, strategy::ring> comm(std::move(b), c);
        std::vector<float> v(4, 1.0f);
        if (comm.rank() == 1) std::this_thread::sleep_for(1500ms);  // rank 0 waits for it
        comm.allreduce(view(v));
        CHECK(v[0] == 2.0f);
      },
      {"stall: rank 0 has waited ",
       " s in allreduce (collective #0 of its communicator) for rank 1, which has not entered it "
       "yet"}));
}

TEST_CASE("engine: tensors over one communicator, the agreement over another") {
  local_world data_world(3);
  local_world control_world(3);
  data_world.run([&](local_backend b) {
    config c;
    c.timeout = 30s;
    const int r = b.rank();
    any_communicator data(communicator<local_backend, strategy::ring>(std::move(b), c));
    any_communicator control(
        communicator<local_backend, strategy::ring>(control_world.backend(r), c));
    engine eng(data, control, c);
    std::vector<double> v(100, static_cast<double>(r + 1));
    eng.allreduce_async("v", view(v), reduce_op::sum).wait();
    CHECK(v[99] == 6.0);
    CHECK(data.calls() > 0);                                // the tensor went over data
    CHECK(control.calls() > 0);                             // the agreement over control
    CHECK_THROWS_AS(eng.shrink(), invalid_argument_error);  // shrink both, make a new engine
  });
}

TEST_CASE("engine: one agreement per cycle, the negotiation's; the batches run on it") {
  local_world world(3);
  world.run([&](local_backend b) {
    config c;
    c.timeout = 30s;
    c.mismatch_check = true;
    const int r = b.rank();
    any_communicator comm(communicator<local_backend, strategy::ring>(std::move(b), c));
    engine eng(comm);
    std::vector<std::vector<float>> grads(8, std::vector<float>(50));
    std::vector<double> bias(3);
    const auto step = [&] {
      std::vector<work> ws;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        std::fill(grads[i].begin(), grads[i].end(), static_cast<float>(r + 1));
        ws.push_back(eng.allreduce_async("g" + std::to_string(i), view(grads[i]), reduce_op::sum));
      }
      std::fill(bias.begin(), bias.end(), r == 0 ? 7.0 : 0.0);
      ws.push_back(eng.broadcast_async("bias", view(bias), 0));
      for (auto& w : ws) w.wait();
    };
    step();  // the first step's names go through a full exchange
    const auto before = eng.stats();
    const std::uint64_t agreed_before = comm.agreements();
    for (int s = 0; s < 20; ++s) step();
    const auto after = eng.stats();
    const std::uint64_t cycles = after.cycles - before.cycles;
    const std::uint64_t full = after.full_cycles - before.full_cycles;
    const std::uint64_t collectives = after.collectives - before.collectives;
    CAPTURE(cycles);
    CAPTURE(full);
    CAPTURE(collectives);
    CHECK(collectives >= 40);  // at least a grouped allreduce and a broadcast per step
    // Each cycle's negotiation is one collective with its agreement; a full exchange adds two
    // (the sizes and the reports); the planned collectives add none.
    CHECK(comm.agreements() - agreed_before == cycles + 2 * full);
    CHECK(grads[7][49] == 6.0f);
    CHECK(bias[2] == 7.0);
  });
}

TEST_CASE("communicator: next_call_agreed() skips the next collective's agreement only") {
  local_world world(2);
  world.run([&](local_backend b) {
    config c;
    c.timeout = 30s;
    c.mismatch_check = true;
    communicator<local_backend, strategy::ring> comm(std::move(b), c);
    std::vector<float> v(4, 1.0f);
    comm.allreduce(view(v));
    CHECK(comm.agreements() == 1);
    comm.next_call_agreed();
    comm.allreduce(view(v));
    CHECK(comm.agreements() == 1);
    CHECK(comm.calls() == 2);
    // A promise taken by a call refused before it ran is gone with it.
    comm.next_call_agreed();
    CHECK_THROWS_AS(comm.allreduce(tensor_view{nullptr, 4, dtype::f32}), invalid_argument_error);
    comm.allreduce(view(v));
    CHECK(comm.agreements() == 2);
    CHECK(v[0] == 8.0f);
  });
}

TEST_CASE("engine: shrink after a lost rank: the survivors go on over their own communicator") {
  local_world world(4);
  std::vector<std::string> lost(4), after(4);
  std::atomic<int> finished_first{0};
  world.run([&](local_backend b) {
    const int r = b.rank();
    local_backend mine = b;  // rank 2 aborts through it: the local backend's way of losing a rank
    config c;
    // Also the survivors' window: shrink() waits that long for the lost rank, and a survivor
    // slower than it (stopping its engine under a sanitizer) would be left out.
    c.timeout = 4s;
    any_communicator comm(communicator<local_backend, strategy::ring>(std::move(b), c));
    engine eng(comm);
    std::vector<float> v(64, static_cast<float>(r + 1));
    eng.allreduce_async("grad", view(v), reduce_op::sum).wait();
    CHECK(v[63] == 10.0f);
    // Rank 2 goes only once every rank has its first result: an abort while another rank is
    // still finishing that allreduce would fail it there instead of in the second.
    ++finished_first;
    if (r == 2) {
      while (finished_first.load() < 4) std::this_thread::yield();
      mine.abort("rank 2 lost its device");
      return;
    }
    std::fill(v.begin(), v.end(), static_cast<float>(r + 1));
    try {
      eng.allreduce_async("grad", view(v), reduce_op::sum).wait();
    } catch (const peer_lost_error& e) {
      lost[static_cast<std::size_t>(r)] = e.what();
    }
    eng.shrink();
    CHECK(comm.size() == 3);
    CHECK(eng.size() == 3);
    CHECK(comm.rank() == (r < 2 ? r : r - 1));  // renumbered in the old order
    std::fill(v.begin(), v.end(), static_cast<float>(r + 1));
    eng.allreduce_async("grad", view(v), reduce_op::sum).wait();
    after[static_cast<std::size_t>(r)] = std::to_string(v[0]) + " " + std::to_string(v[63]);
  });
  for (int r : {0, 1, 3}) {
    CHECK_HAS(lost[static_cast<std::size_t>(r)], "rank 2 lost its device");
    CHECK(after[static_cast<std::size_t>(r)] == "7.000000 7.000000");  // ranks 1, 2 and 4 added
  }
}

// DISTCOMM_TIMELINE often points into /tmp: a link planted at its path is refused, naming it,
// and the file it points to is left as it was.
TEST_CASE("timeline: a symbolic link at DISTCOMM_TIMELINE's path is refused, never followed") {
  const std::string victim = "/tmp/distcomm_test_timeline_victim_" + std::to_string(::getpid());
  const std::string path = "/tmp/distcomm_test_timeline_link_" + std::to_string(::getpid());
  { std::ofstream(victim) << "precious\n"; }
  REQUIRE(::symlink(victim.c_str(), path.c_str()) == 0);
  CHECK_THROWS_WITH_AS(trace::timeline::open(path, 0),
                       doctest::Contains("it is a symbolic link, and DistComm writes through none"),
                       invalid_argument_error);
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  CHECK(line == "precious");
  std::remove(path.c_str());
  std::remove(victim.c_str());
}
