// The autotuner: its search as a pure function (known optimum, early stop, noise kept out), the
// saved choice's file, communicator::retune, and the engine tuning a job of 3 local ranks: every
// rank ends on the same choice, results stay exact while settings change, and the saved choice
// is used by the next engine without a search.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/autotune/choice.hpp"
#include "distcomm/autotune/search.hpp"
#include "distcomm/autotune/tuner.hpp"
#include "distcomm/backends/local.hpp"
#include "distcomm/engine/engine.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/ring.hpp"

using namespace distcomm;
using namespace distcomm::autotune;
using namespace std::chrono_literals;

namespace {

// A bowl: fastest at (16, 2.5), each step away a little slower.
double bowl(const std::vector<double>& p) {
  return 1.0 + 0.2 * std::fabs(std::log2(p[0] / 16.0)) + 0.1 * std::fabs(std::log2(p[1] / 2.5));
}

std::string temp_file(const char* name) {
  return "/tmp/distcomm_test_autotune_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace

TEST_CASE("autotune search: finds the optimum of each setting, the same for the same numbers") {
  // Each list as the tuner orders a grid without a model: the start, then the nearest first.
  const std::vector<parameter> params = {{"threshold", {64, 16, 256, 4, 1}},
                                         {"cycle", {1, 0.5, 2.5, 5, 10}}};
  search s(params);
  search twin(params);
  int trials = 0;
  while (!s.done()) {
    REQUIRE(s.point() == twin.point());
    const double t = bowl(s.point());
    s.record(t);
    twin.record(t);
    ++trials;
    REQUIRE(trials < 50);
  }
  CHECK(twin.done());
  CHECK(s.best() == std::vector<double>{16, 2.5});
  CHECK(s.best_seconds() == doctest::Approx(1.0));  // measured twice, the same
  CHECK(s.start_seconds() == doctest::Approx(bowl({64, 1})));
  CHECK(s.trials().size() == static_cast<std::size_t>(trials));
  CHECK(s.point() == s.best());  // once done, the best
  CHECK_THROWS_AS(s.record(1.0), invalid_argument_error);
}

TEST_CASE("autotune search: the best is measured again against the start; one lucky run loses") {
  search s({{"threshold", {64, 16, 4}}}, 0.05, 2);
  s.record(1.0);  // start, 64
  s.record(0.7);  // 16: a lucky run
  s.record(1.2);  // 4
  REQUIRE_FALSE(s.done());
  CHECK(s.point() == std::vector<double>{64});  // the start again
  s.record(0.95);
  CHECK(s.point() == std::vector<double>{16});  // the best again
  s.record(1.3);                                // 0.7 + 1.3 = 2.0 against 1.95: not better
  REQUIRE(s.done());
  CHECK(s.best() == std::vector<double>{64});
  CHECK(s.best_seconds() == doctest::Approx(0.975));
  CHECK(s.start_seconds() == doctest::Approx(0.975));  // both of its measurements
  CHECK(s.trials().size() == 5);

  search t({{"threshold", {64, 16, 4}}}, 0.05, 2);
  for (double x : {1.0, 0.7, 1.2, 1.0, 0.75}) t.record(x);  // 16 holds up
  REQUIRE(t.done());
  CHECK(t.best() == std::vector<double>{16});
  CHECK(t.best_seconds() == doctest::Approx(0.725));
}

TEST_CASE("autotune search: a gain within the noise keeps the starting point") {
  search s({{"threshold", {64, 16, 4}}}, 0.05);
  s.record(1.00);  // start
  s.record(0.97);  // 3% better: noise
  s.record(0.99);
  REQUIRE(s.done());
  CHECK(s.best() == std::vector<double>{64});
  CHECK(s.best_seconds() == 1.00);
}

TEST_CASE("autotune search: values ordered by a prediction stop after `patience` misses") {
  search s({{"threshold", {16, 64, 4, 1, 256, 1024}}}, 0.03, 2);
  s.record(1.0);  // 16, the predicted best
  s.record(1.5);  // 64
  s.record(1.6);  // 4: two misses in a row, the rest is not tried
  CHECK(s.done());
  CHECK(s.trials().size() == 3);
  CHECK(s.best() == std::vector<double>{16});
}

TEST_CASE("autotune search: bad input is refused") {
  using params = std::vector<parameter>;
  CHECK_THROWS_AS(search(params{}), invalid_argument_error);
  CHECK_THROWS_AS(search(params{{"x", {}}}), invalid_argument_error);
  CHECK_THROWS_AS(search(params{{"x", {1}}}, 1.5), invalid_argument_error);
  search s({{"x", {1, 2}}});
  CHECK_THROWS_AS(s.record(-1), invalid_argument_error);
  CHECK_THROWS_AS(s.record(std::nan("")), invalid_argument_error);
}

TEST_CASE("autotune: strategy cut-offs scale; the choice's file round-trips and is checked") {
  const algo_table t = algo_table::parse("rd:0-16K;tree:16K-64K;ring:64K-max", "test");
  CHECK(scaled(t, 4).to_string() == "rd:0-64K;tree:64K-256K;ring:256K-max");
  CHECK(scaled(t, 0.25).to_string() == "rd:0-4K;tree:4K-16K;ring:16K-max");
  CHECK(scaled(t, 1).to_string() == t.to_string());

  choice c;
  c.backend = "shm";
  c.strategy = "automatic";
  c.ranks = 4;
  c.settings = {std::size_t{16} << 20, 65536, 262144, t};
  c.cycle_ms = 2.5;
  c.step_seconds = 0.125;
  c.start_seconds = 0.25;
  c.trials = 9;
  const choice back = from_json(to_json(c), "f.json");
  CHECK(back.settings == c.settings);
  CHECK(back.cycle_ms == 2.5);
  CHECK(back.trials == 9);
  CHECK(back.describe() == c.describe());
  CHECK(c.describe().find("fusion threshold 16M") != std::string::npos);
  CHECK(back.settings.hierarchical_threshold == 0);  // flat: not written, read back as 0
  CHECK(to_json(c).find("hierarchical") == std::string::npos);
  choice across = c;  // made on a hierarchical communicator
  across.settings.hierarchical_threshold = std::size_t{1} << 20;
  CHECK(from_json(to_json(across), "f.json").settings == across.settings);
  CHECK(across.describe().find("hierarchical from 1M") != std::string::npos);
  CHECK(back.mismatch("shm", "automatic", 4).empty());
  CHECK(back.mismatch("gloo", "automatic", 4).find("4 ranks of shm") != std::string::npos);

  CHECK_THROWS_WITH_AS(from_json("{}", "f.json"), doctest::Contains("f.json: not an autotune"),
                       invalid_argument_error);
  CHECK_THROWS_WITH_AS(from_json("not json", "f.json"), doctest::Contains("f.json"),
                       invalid_argument_error);
  std::string bad_table = to_json(c);
  bad_table.replace(bad_table.find("rd:0-16K"), 8, "xx:0-16K");
  CHECK_THROWS_WITH_AS(from_json(bad_table, "f.json"), doctest::Contains("f.json"),
                       invalid_argument_error);

  const std::string file = temp_file("choice.json");
  CHECK_FALSE(read_file(file).has_value());
  save(c, file);
  REQUIRE(read_file(file).has_value());
  CHECK(from_json(*read_file(file), file).settings == c.settings);
  std::remove(file.c_str());
}

TEST_CASE("retune: every rank's next collectives use the new settings; results stay exact") {
  local_world world(3);
  world.run([&](local_backend b) {
    const int r = b.rank();
    any_communicator comm(communicator<local_backend>(std::move(b), config{}));
    REQUIRE(comm.retunable());
    tuning t = comm.current_tuning();
    CHECK(t.segment_bytes == 256 * 1024);
    CHECK_FALSE(t.algo.empty());  // automatic's table as it resolves
    t.fusion_threshold = 4096;
    t.fusion_cutoff = 0;
    t.segment_bytes = 1024;
    t.algo = algo_table::parse("tree:0-1K;ring:1K-max", "test");
    comm.retune(t);
    CHECK(comm.current_tuning() == t);
    CHECK(comm.settings().segment_bytes == std::optional<std::size_t>(1024));
    std::vector<std::vector<float>> grads = {std::vector<float>(3000, 1.0f + static_cast<float>(r)),
                                             std::vector<float>(100, 2.0f)};
    std::vector<tensor_view> views = {view(grads[0]), view(grads[1])};
    comm.allreduce(span<const tensor_view>(views.data(), views.size()), reduce_op::sum);
    CHECK(grads[0][2999] == 6.0f);
    CHECK(grads[1][0] == 6.0f);
    t.segment_bytes = 32;
    CHECK_THROWS_AS(comm.retune(t), invalid_argument_error);
    // A rank that retunes alone is named at the next collective.
    if (r == 1) {
      t.segment_bytes = 2048;
      comm.retune(t);
    }
    std::vector<float> v(512, 1.0f);
    CHECK_THROWS_WITH_AS(comm.allreduce(view(v)), doctest::Contains("DISTCOMM_SEGMENT_SIZE"),
                         mismatch_error);
  });
}

TEST_CASE("autotune: the engine's search ends on the same choice on every rank, and is reused") {
  const std::string file = temp_file("engine.json");
  std::remove(file.c_str());
  constexpr int p = 3;
  std::mutex m;
  std::vector<status> ends(p), reloaded(p);
  std::vector<tuning> in_use(p);
  local_world world(p);
  world.run([&](local_backend b) {
    const int r = b.rank();
    config c;
    c.autotune = true;
    c.autotune_steps = 1;
    c.autotune_file = file;
    any_communicator comm(communicator<local_backend>(std::move(b), c));
    // Layers of different sizes, handed over with some compute in between; every step's sums
    // are checked while the settings change under them.
    std::vector<std::vector<float>> grads;
    for (std::size_t n : {300000u, 2000u, 150000u, 64u, 40000u, 8u}) grads.emplace_back(n);
    const auto step = [&](engine& eng) {
      std::vector<work> works;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        std::fill(grads[i].begin(), grads[i].end(), static_cast<float>(r + 1));
        std::this_thread::sleep_for(200us);
        works.push_back(
            eng.allreduce_async("g" + std::to_string(i), view(grads[i]), reduce_op::sum));
      }
      for (work& w : works) w.wait();
      for (const auto& g : grads) REQUIRE(g.back() == 6.0f);  // 1 + 2 + 3
    };
    {
      engine eng(comm, c);
      // A one-off allreduce first, as a trainer averages something once at start-up: the
      // search must still find the steps.
      std::vector<float> once(10, 1.0f);
      eng.allreduce_async("start-up", view(once), reduce_op::sum).wait();
      for (int s = 0; s < 150 && !eng.autotune().done; ++s) step(eng);
      // Ranks may see `done` one step apart: a few more steps, as a trainer goes on.
      for (int s = 0; s < 3; ++s) step(eng);
      std::lock_guard<std::mutex> lock(m);
      ends[static_cast<std::size_t>(r)] = eng.autotune();
      in_use[static_cast<std::size_t>(r)] = comm.current_tuning();
    }
    engine again(comm, c);  // the file is there now: no search
    step(again);
    std::lock_guard<std::mutex> lock(m);
    reloaded[static_cast<std::size_t>(r)] = again.autotune();
  });
  for (int r = 0; r < p; ++r) {
    CAPTURE(r);
    const status& s = ends[static_cast<std::size_t>(r)];
    CHECK(s.active);
    REQUIRE(s.done);
    CHECK_FALSE(s.loaded);
    CHECK(s.current.trials >= 5);  // the start and at least one more value per setting
    CHECK(s.trials.size() == static_cast<std::size_t>(s.current.trials));
    // The start is the settings given (64M, 1 ms by default), whatever the model would pick: a
    // choice must beat them.
    REQUIRE_FALSE(s.trials.empty());
    CHECK(s.trials.front().point[0] == static_cast<double>(config{}.fusion_threshold));
    CHECK(s.trials.front().point[1] == config{}.cycle_time.count() * 1000.0);
    CHECK(s.current.step_seconds > 0);
    CHECK(s.current.step_seconds <= s.current.start_seconds);
    // The same choice, and the same measurements, on every rank.
    CHECK(s.current.describe() == ends[0].current.describe());
    CHECK(s.current.step_seconds == ends[0].current.step_seconds);
    CHECK(in_use[static_cast<std::size_t>(r)] == s.current.settings);
    const status& again = reloaded[static_cast<std::size_t>(r)];
    CHECK(again.loaded);
    CHECK(again.done);
    CHECK(again.current.describe() == s.current.describe());
  }
  const auto text = read_file(file);
  REQUIRE(text.has_value());
  CHECK(from_json(*text, file).describe() == ends[0].current.describe());
  std::remove(file.c_str());
}

TEST_CASE("autotune: a file of another job is not used; a broken one is named on every rank") {
  const std::string file = temp_file("other.json");
  choice other;
  other.backend = "gloo";
  other.strategy = "automatic";
  other.ranks = 8;
  other.settings = {1 << 20, 0, 4096, {}};
  save(other, file);
  local_world world(2);
  world.run([&](local_backend b) {
    config c;
    c.autotune_file = file;
    any_communicator comm(communicator<local_backend, strategy::ring>(std::move(b), c));
    {
      engine eng(comm, c);
      CHECK_FALSE(eng.autotune().loaded);
      CHECK_FALSE(eng.autotune().active);  // DISTCOMM_AUTOTUNE is off: nothing searched
    }
    comm.barrier();
    if (comm.rank() == 0) {
      std::FILE* f = std::fopen(file.c_str(), "w");
      std::fputs("{\"format\": 3}", f);
      std::fclose(f);
    }
    comm.barrier();
    CHECK_THROWS_WITH_AS(engine(comm, c), doctest::Contains("DISTCOMM_AUTOTUNE_FILE"),
                         invalid_argument_error);
  });
  std::remove(file.c_str());
}

// The choice file is written through a temporary of its own, then renamed: a link planted at the
// name a save once wrote through (<file>.tmp.<pid>), or at the file itself, redirects nothing.
TEST_CASE("autotune choice: links planted beside the file or at it redirect nothing") {
  choice c;
  c.backend = "shm";
  c.strategy = "ring";
  c.ranks = 2;
  c.settings.segment_bytes = 4096;
  const std::string file = temp_file("linked.json");
  const std::string victim = temp_file("victim");
  std::FILE* f = std::fopen(victim.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs("precious\n", f);
  std::fclose(f);
  const std::string old_tmp = file + ".tmp." + std::to_string(::getpid());
  REQUIRE(::symlink(victim.c_str(), old_tmp.c_str()) == 0);
  REQUIRE(::symlink(victim.c_str(), file.c_str()) == 0);
  save(c, file);
  CHECK(read_file(victim) == std::optional<std::string>("precious\n"));
  REQUIRE(read_file(file).has_value());
  CHECK(from_json(*read_file(file), file).ranks == 2);
  for (const auto& name : {file, victim, old_tmp}) std::remove(name.c_str());
}
