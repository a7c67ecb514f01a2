// The registries (backends and strategies by name), any_communicator and distcomm::init() in a
// process no launcher started. Multi-process init() runs in the launcher tests (distcomm-hello,
// distcomm-train-mlp under distcomm-run and mpirun).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/distcomm.hpp"
#include "distcomm/hierarchical.hpp"
#include "distcomm/registry/backends.hpp"
#include "p2p_only.hpp"

namespace dc = distcomm;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dc::invalid_argument_error& e) {
    return e.what();
  }
  return "(no invalid_argument_error)";
}

std::string readme() {
  std::ifstream in(std::string(DISTCOMM_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The README's table row of a setting.
std::string readme_row(const std::string& name) {
  const std::string text = readme();
  const auto at = text.find("| `" + name + "` |");
  REQUIRE_MESSAGE(at != std::string::npos, "README.md has no row for " << name);
  return text.substr(at, text.find('\n', at) - at);
}

dc::config quick() {
  dc::config c;
  c.timeout = std::chrono::seconds(30);
  return c;
}

}  // namespace

TEST_CASE("strategy registry: names and aliases are unique and find the same entry") {
  std::set<std::string> seen;
  for (const dc::strategy_info& s : dc::strategies()) {
    CAPTURE(s.name);
    CHECK(seen.insert(s.name).second);
    CHECK(std::string(dc::find_strategy(s.name).name) == s.name);
    if (*s.alias != '\0') {
      CHECK(seen.insert(s.alias).second);
      CHECK(std::string(dc::find_strategy(s.alias).name) == s.name);
    }
  }
  for (const char* n : {"auto", "ring", "tree", "rd", "ps", "native"}) CHECK(seen.count(n) == 1);
  CHECK(std::string(dc::find_strategy("recursive_doubling").name) == "rd");
  CHECK(std::string(dc::find_strategy("parameter_server").name) == "ps");
  const std::string e = error_of([] { dc::find_strategy("rign"); });
  CHECK(e.find("unknown strategy 'rign'") != std::string::npos);
  CHECK(e.find(dc::join_names(dc::strategies())) != std::string::npos);
}

TEST_CASE("strategy registry: the visitor passes the type, and refuses what a backend cannot run") {
  CHECK(dc::visit_strategy<dc::local_backend>("rd", [](auto tag) {
    return std::is_same_v<typename decltype(tag)::type, dc::strategy::recursive_doubling>;
  }));
  CHECK(dc::visit_strategy<dc::local_backend>("native", [](auto tag) {
    return std::is_same_v<typename decltype(tag)::type, dc::strategy::native>;
  }));
  int calls = 0;
  const std::string e =
      error_of([&] { dc::visit_strategy<p2p_only>("native", [&](auto) { ++calls; }); });
  CHECK(calls == 0);
  CHECK(e.find("backend 'p2p-only'") != std::string::npos);
  CHECK(e.find("no native allreduce") != std::string::npos);
  CHECK(e.find("auto, ring, tree, rd, ps") != std::string::npos);
  CHECK(dc::join_names(dc::strategies_for<p2p_only>()).find("native") == std::string::npos);
  CHECK(std::string(
            dc::communicator<dc::local_backend, dc::strategy::parameter_server>::strategy_name()) ==
        "ps");
}

TEST_CASE(
    "backend registry: local is always built, names are unique, unknown names list the rest") {
  std::set<std::string> seen;
  for (const dc::backend_info& b : dc::built_backends()) CHECK(seen.insert(b.name).second);
  CHECK(dc::is_built_backend("local"));
  CHECK(!dc::is_built_backend("tcp"));
  const std::string e = error_of([] { dc::visit_backend("nope", quick(), [](auto) {}); });
  CHECK(e.find("backend 'nope' is neither built into this DistComm") != std::string::npos);
  CHECK(e.find(dc::join_names(dc::built_backends())) != std::string::npos);
}

TEST_CASE("backend registry: the default backend for each kind of job") {
  dc::world_info w;
  CHECK(dc::default_backend(w) == "local");  // a job of one
  w.size = 4;
  w.launcher = dc::launcher_kind::open_mpi;
  const std::string under_mpirun = dc::default_backend(w);
  CHECK(under_mpirun == (dc::is_built_backend("mpi")    ? "mpi"
                         : dc::is_built_backend("gloo") ? "gloo"
                                                        : "ucx"));
  w.launcher = dc::launcher_kind::torchrun;
  CHECK(dc::default_backend(w) == (dc::is_built_backend("gloo") ? "gloo" : "ucx"));
  w.local_size = 4;  // every rank on this host
  CHECK(dc::default_backend(w) == (dc::is_built_backend("shm")    ? "shm"
                                   : dc::is_built_backend("gloo") ? "gloo"
                                                                  : "ucx"));
}

TEST_CASE("README: the names of every backend and strategy, from the registries") {
  const std::string backend_row = readme_row("DISTCOMM_BACKEND");
  for (const char* b : {"local", "mpi", "gloo", "ucx", "shm", "nccl"}) {
    CAPTURE(b);
    CHECK(backend_row.find("`" + std::string(b) + "`") != std::string::npos);
  }
  for (const dc::backend_info& b : dc::built_backends()) {
    CAPTURE(b.name);
    CHECK(backend_row.find("`" + std::string(b.name) + "`") != std::string::npos);
  }
  const std::string strategy_row = readme_row("DISTCOMM_STRATEGY");
  for (const dc::strategy_info& s : dc::strategies()) {
    CAPTURE(s.name);
    CHECK(strategy_row.find("`" + std::string(s.name) + "`") != std::string::npos);
  }
}

TEST_CASE("any_communicator: every collective of every strategy, through one type") {
  for (const dc::strategy_info& s : dc::strategies()) {
    CAPTURE(s.name);
    dc::local_world world(3);
    world.run([&](dc::local_backend b) {
      dc::any_communicator comm = dc::make_communicator(std::move(b), s.name, quick());
      CHECK(std::string(comm.backend_name()) == "local");
      CHECK(std::string(comm.strategy_name()) == s.name);
      const int p = comm.size();
      std::vector<float> v(1000, static_cast<float>(comm.rank() + 1));
      comm.allreduce(dc::view(v));
      CHECK(v.front() == 6.0f);
      CHECK(v.back() == 6.0f);
      std::vector<float> out(v.size());
      comm.allreduce(dc::view(v), dc::view(out), dc::reduce_op::max);
      CHECK(out[7] == 6.0f);
      std::vector<float> a(10, 1.0f), c(20, 2.0f);
      const dc::tensor_view group[] = {dc::view(a), dc::view(c)};
      comm.allreduce(dc::span<const dc::tensor_view>(group, 2));
      CHECK(a[9] == 3.0f);
      CHECK(c[19] == 6.0f);
      std::vector<int> blocks(static_cast<std::size_t>(p) * 4, comm.rank());
      std::vector<int> mine(4);
      comm.reduce_scatter(dc::view(blocks), dc::view(mine));
      CHECK(mine[0] == 3);
      std::vector<int> all(static_cast<std::size_t>(p) * 2);
      std::vector<int> two(2, comm.rank());
      comm.allgather(dc::view(two), dc::view(all));
      CHECK(all[5] == 2);
      int x = comm.rank() == 1 ? 42 : 0;
      comm.broadcast(dc::view(&x, 1), 1);
      CHECK(x == 42);
      comm.barrier();
      CHECK(comm.calls() == 7);
    });
  }
}

TEST_CASE("any_communicator: errors cross unchanged; the typed communicator is reachable") {
  dc::local_world world(2);
  world.run([&](dc::local_backend b) {
    dc::any_communicator comm = dc::make_communicator(std::move(b), "ring", quick());
    using typed = dc::communicator<dc::local_backend, dc::strategy::ring>;
    REQUIRE(comm.target<typed>() != nullptr);
    CHECK(comm.target<typed>()->rank() == comm.rank());
    CHECK(comm.target<dc::communicator<dc::local_backend, dc::strategy::tree>>() == nullptr);
    // A count that differs across ranks: mismatch_error on every rank, and the communicator stays
    // usable.
    std::vector<float> v(comm.rank() == 0 ? 10 : 11, 1.0f);
    CHECK_THROWS_AS(comm.allreduce(dc::view(v)), dc::mismatch_error);
    std::vector<float> w(5, 1.0f);
    comm.allreduce(dc::view(w));
    CHECK(w[0] == 2.0f);
    CHECK_THROWS_AS(comm.broadcast(dc::view(w), 7), dc::invalid_argument_error);
    dc::any_communicator moved = std::move(comm);
    CHECK_THROWS_AS(comm.barrier(), dc::error);  // NOLINT(bugprone-use-after-move): on purpose
    moved.barrier();
  });
  dc::local_world one(1);
  one.run([&](dc::local_backend b) {
    CHECK(error_of([&] {
            dc::make_communicator(std::move(b), "tre", quick());
          }).find("unknown strategy 'tre'") != std::string::npos);
  });
}

TEST_CASE("init: a process no launcher started is a job of one on the local backend") {
  dc::any_communicator comm = dc::init({"", "", quick()});
  CHECK(comm.size() == 1);
  CHECK(comm.rank() == 0);
  CHECK(std::string(comm.backend_name()) == "local");
  CHECK(std::string(comm.strategy_name()) == "auto");
  std::vector<double> v(3, 2.5);
  comm.allreduce(dc::view(v));
  CHECK(v[2] == 2.5);

  dc::config c = quick();
  c.strategy = "tree";  // as DISTCOMM_STRATEGY=tree sets it
  CHECK(std::string(dc::init({"local", "", c}).strategy_name()) == "tree");
  CHECK(std::string(dc::init({"local", "ring", c}).strategy_name()) == "ring");  // named wins
  CHECK(dc::resolved_backend({"", "", quick()}) == "local");
  CHECK(dc::resolved_strategy({"", "recursive_doubling", quick()}) == "rd");
}

TEST_CASE("init: whether a job across hosts is hierarchical is a setting, from code or env") {
  if (dc::intra_host_backend().empty()) return;  // no backend inside a host: never hierarchical
  dc::world_info w;  // rank 0 of two hosts with two ranks each, started by torchrun
  w.size = 4;
  w.local_size = 2;
  w.launcher = dc::launcher_kind::torchrun;
  dc::config c = quick();
  CHECK(dc::hierarchical_threshold(w, c, {}) == dc::hierarchical_threshold_default);
  // init_options::settings turn it off or move it whatever the environment says.
  c.hierarchical = "off";
  CHECK_FALSE(dc::hierarchical_threshold(w, c, {}).has_value());
  c.hierarchical = "64K";
  CHECK(dc::hierarchical_threshold(w, c, {}) == std::size_t{64} << 10);
  c.hierarchical = "lots";
  CHECK_THROWS_AS((void)dc::hierarchical_threshold(w, c, {}), dc::invalid_argument_error);
  // DISTCOMM_HIERARCHICAL reaches it through config::from_env.
  const dc::config off = dc::config::from_env([](const char* name) -> const char* {
    return std::string(name) == "DISTCOMM_HIERARCHICAL" ? "off" : nullptr;
  });
  CHECK(off.hierarchical == "off");
  CHECK_FALSE(dc::hierarchical_threshold(w, off, {}).has_value());
}

TEST_CASE("init: a plugin by name, and the plugin form of a built-in backend") {
  // The build tree's lib folder is on the plugin search path of the build tree's programs.
  dc::any_communicator comm = dc::init({"plugin:local", "ring", quick()});
  CHECK(std::string(comm.backend_name()) == "local");
  CHECK(std::string(comm.strategy_name()) == "ring");
  std::vector<float> v(100, 3.0f);
  comm.allreduce(dc::view(v));
  CHECK(v[99] == 3.0f);
  const auto names = dc::available_backends();
  CHECK(std::count(names.begin(), names.end(), "local") == 1);  // built and plugin: listed once
}

TEST_CASE("init: over a job the program met itself (a shared store), not the launcher's") {
  // Two ranks as threads of this process, meeting through one store as a framework's would.
  for (const std::string backend : {"gloo", "ucx"}) {
    if (!dc::is_built_backend(backend)) continue;
    CAPTURE(backend);
    auto kv = std::make_shared<dc::hash_store>(std::chrono::duration<double>(30.0));
    std::vector<double> sums(2, 0.0);
    std::vector<std::string> names(2);
    auto rank = [&](int r) {
      dc::job j;
      j.world.rank = r;
      j.world.size = 2;
      j.kv = kv;
      dc::any_communicator comm = dc::init(j, {backend, "ring", quick()});
      double x = r + 1.0;
      comm.allreduce(dc::view(&x, 1));
      sums[static_cast<std::size_t>(r)] = x;
      names[static_cast<std::size_t>(r)] = comm.backend_name();
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    CHECK(sums == std::vector<double>{3.0, 3.0});
    CHECK(names[0] == backend);
  }
  // local serves a given job of one, and refuses a larger one, saying why.
  CHECK(std::string(dc::init(dc::job{}, {"", "", quick()}).backend_name()) == "local");
  dc::job two;
  two.world.size = 2;
  CHECK(error_of([&] {
          dc::init(two, {"local", "", quick()});
        }).find("threads of one process") != std::string::npos);
}

TEST_CASE("init: the interface in init_options::settings reaches gloo and ucx") {
  // DISTCOMM_IFACE from code, not the environment: a wrong one is refused before the ranks meet,
  // naming it; loopback's own name then connects.
  ::unsetenv("DISTCOMM_IFACE");
  for (const std::string backend : {"gloo", "ucx"}) {
    if (!dc::is_built_backend(backend)) continue;
    CAPTURE(backend);
    for (const std::string iface : {"no-such-interface.invalid", "lo"}) {
      CAPTURE(iface);
      auto kv = std::make_shared<dc::hash_store>(std::chrono::duration<double>(30.0));
      dc::config c = quick();
      c.iface = iface;
      std::vector<std::string> errors(2);
      std::vector<double> sums(2, 0.0);
      auto rank = [&](int r) {
        try {
          dc::job j;
          j.world.rank = r;
          j.world.size = 2;
          j.kv = kv;
          dc::any_communicator comm = dc::init(j, {backend, "ring", c});
          double x = r + 1.0;
          comm.allreduce(dc::view(&x, 1));
          sums[static_cast<std::size_t>(r)] = x;
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      };
      std::thread other(rank, 1);
      rank(0);
      other.join();
      if (iface == "lo") {
        CHECK(errors == std::vector<std::string>(2));
        CHECK(sums == std::vector<double>{3.0, 3.0});
      } else {
        for (const std::string& e : errors) CHECK_MESSAGE(e.find(iface) != std::string::npos, e);
      }
    }
  }
}

TEST_CASE("init: unknown names fail before anything connects, naming what there is") {
  const std::string e = error_of([] { dc::init({"tpc", "", quick()}); });
  CHECK(e.find("backend 'tpc' is neither built") != std::string::npos);
  CHECK(e.find("libdistcomm_backend_tpc.so") != std::string::npos);
  CHECK(e.find("local") != std::string::npos);
  CHECK(error_of([] {
          dc::init({"local", "fastest", quick()});
        }).find("unknown strategy") != std::string::npos);
}

TEST_CASE("config: DISTCOMM_STRATEGY takes the registry's names and aliases, nothing else") {
  const auto with = [](const char* value) {
    return dc::config::from_env([value](const char* name) -> const char* {
      return std::string(name) == "DISTCOMM_STRATEGY" ? value : nullptr;
    });
  };
  CHECK(with("recursive_doubling").strategy == "rd");
  CHECK(with("ring").strategy == "ring");
  CHECK_THROWS_WITH_AS(with("rings"), doctest::Contains("DISTCOMM_STRATEGY"),
                       dc::invalid_argument_error);
  CHECK(dc::config{}.to_string().find("DISTCOMM_STRATEGY=(default)") != std::string::npos);
}

TEST_CASE("README: the multi-process example is examples/quickstart/quickstart.cpp") {
  std::ifstream in(std::string(DISTCOMM_SOURCE_DIR) + "/examples/quickstart/quickstart.cpp");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string source = ss.str();
  const auto from = source.find("#include");
  REQUIRE(from != std::string::npos);
  // Verbatim from the first #include on, so the README shows a program that is built and run
  // under the launchers (tests/launchers: quickstart_*).
  CHECK_MESSAGE(
      readme().find(source.substr(from)) != std::string::npos,
      "README.md's multi-process example differs from examples/quickstart/quickstart.cpp");
}

TEST_CASE(
    "any_communicator: taking over a typed communicator leaves a moved-from one that is safe") {
  dc::local_world world(2);
  world.run([&](dc::local_backend b) {
    using typed = dc::communicator<dc::local_backend, dc::strategy::ring>;
    typed first(std::move(b), quick());
    std::vector<float> v(8, 1.0f);
    first.allreduce(dc::view(v));  // a collective made: leaving would now say goodbye
    dc::any_communicator erased(std::move(first));
    erased.allreduce(dc::view(v));
    CHECK(v[0] == 4.0f);
  });  // `first` (moved from) is destroyed here without touching its moved-from backend
  dc::local_world one(1);
  one.run([&](dc::local_backend b) {
    dc::any_communicator erased(dc::communicator<dc::local_backend>(std::move(b), quick()));
    CHECK(erased.size() == 1);
  });
}
