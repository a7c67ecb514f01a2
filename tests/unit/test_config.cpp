// config::from_env (with injected environments), algo_table::parse, parse_bytes, to_string, and the
// README settings table.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/table.hpp"

using namespace distcomm;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

using env = std::map<std::string, std::string>;

constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

config from(const env& e) {
  return config::from_env([&](const char* name) -> const char* {
    const auto it = e.find(name);
    return it == e.end() ? nullptr : it->second.c_str();
  });
}

// The message of the invalid_argument_error that f throws, or "<no exception>".
template <class F>
std::string invalid_of(F&& f) {
  try {
    f();
  } catch (const invalid_argument_error& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace

// ---- config::from_env ------------------------------------------------------------------------

TEST_CASE("config: defaults when no variable is set") {
  std::set<std::string> asked;
  const config c = config::from_env([&](const char* name) -> const char* {
    asked.insert(name);
    return nullptr;
  });
  CHECK(c.timeout.count() == 300.0);
  CHECK(c.fusion_threshold == (std::size_t{64} << 20));
  CHECK_FALSE(c.fusion_cutoff.has_value());  // the backend's default
  CHECK_FALSE(c.segment_bytes.has_value());  // the backend's default
  CHECK(c.ps_servers == 1);
  CHECK(c.algo.empty());
  CHECK_FALSE(c.deterministic);
  CHECK(c.backend.empty());
  CHECK(c.log == log_level::warn);
  // A default-constructed config and an empty environment agree.
  CHECK(c.to_string() == config{}.to_string());
  // from_env reads exactly the variables settings() documents.
  std::set<std::string> documented;
  for (const setting_info& s : settings()) documented.insert(s.name);
  CHECK(asked == documented);
}

TEST_CASE("config: an empty value counts as unset") {
  env e;
  for (const setting_info& s : settings()) e[s.name] = "";
  CHECK(from(e).to_string() == config{}.to_string());
}

TEST_CASE("config: every variable is parsed") {
  SUBCASE("DISTCOMM_TIMEOUT") {
    CHECK(from({{"DISTCOMM_TIMEOUT", "30"}}).timeout.count() == 30.0);
    CHECK(from({{"DISTCOMM_TIMEOUT", "2.5"}}).timeout.count() == 2.5);
    CHECK(from({{"DISTCOMM_TIMEOUT", "0.001"}}).timeout.count() == 0.001);
    CHECK(from({{"DISTCOMM_TIMEOUT", "1e3"}}).timeout.count() == 1000.0);
  }
  SUBCASE("DISTCOMM_FUSION_THRESHOLD") {
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "0"}}).fusion_threshold == 0);
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "4096"}}).fusion_threshold == 4096);
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "1K"}}).fusion_threshold == 1024);
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "32m"}}).fusion_threshold == (std::size_t{32} << 20));
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "2G"}}).fusion_threshold == (std::size_t{2} << 30));
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "8KiB"}}).fusion_threshold == 8192);
    CHECK(from({{"DISTCOMM_FUSION_CUTOFF", "0"}}).fusion_cutoff == 0);
    CHECK(from({{"DISTCOMM_FUSION_CUTOFF", "256K"}}).fusion_cutoff == (std::size_t{256} << 10));
    // `max`: one unbounded fusion buffer (every tensor of a dtype in one collective).
    CHECK(from({{"DISTCOMM_FUSION_THRESHOLD", "max"}}).fusion_threshold == unbounded);
  }
  SUBCASE("DISTCOMM_SEGMENT_SIZE") {
    CHECK(from({{"DISTCOMM_SEGMENT_SIZE", "64"}}).segment_bytes == 64);
    CHECK(from({{"DISTCOMM_SEGMENT_SIZE", "1M"}}).segment_bytes == (std::size_t{1} << 20));
    CHECK(from({{"DISTCOMM_SEGMENT_SIZE", "16kb"}}).segment_bytes == 16384);
  }
  SUBCASE("DISTCOMM_PS_SERVERS") {
    CHECK(from({{"DISTCOMM_PS_SERVERS", "0"}}).ps_servers == 0);
    CHECK(from({{"DISTCOMM_PS_SERVERS", "1"}}).ps_servers == 1);
    CHECK(from({{"DISTCOMM_PS_SERVERS", "16"}}).ps_servers == 16);
  }
  SUBCASE("DISTCOMM_ALGO") {
    const config c = from({{"DISTCOMM_ALGO", "tree:0-64K;ring:64K-max"}});
    REQUIRE(c.algo.ranges().size() == 2);
    CHECK(c.algo.to_string() == "tree:0-64K;ring:64K-max");
    CHECK(c.algo.pick(100, algorithm::native) == algorithm::tree);
  }
  SUBCASE("DISTCOMM_DETERMINISTIC") {
    for (const char* yes : {"1", "true", "yes", "on", "TRUE", "On"}) {
      CAPTURE(yes);
      CHECK(from({{"DISTCOMM_DETERMINISTIC", yes}}).deterministic);
    }
    for (const char* no : {"0", "false", "no", "off"}) {
      CAPTURE(no);
      CHECK_FALSE(from({{"DISTCOMM_DETERMINISTIC", no}}).deterministic);
    }
  }
  SUBCASE("DISTCOMM_BACKEND") {
    // Built-in names, and plugins' (libdistcomm_backend_<name>.so).
    for (const char* b :
         {"local", "mpi", "gloo", "ucx", "nccl", "tcp", "plugin:gloo", "my-net_2"}) {
      CAPTURE(b);
      CHECK(from({{"DISTCOMM_BACKEND", b}}).backend == b);
    }
  }
  SUBCASE("DISTCOMM_LOG") {
    CHECK(from({{"DISTCOMM_LOG", "error"}}).log == log_level::error);
    CHECK(from({{"DISTCOMM_LOG", "warn"}}).log == log_level::warn);
    CHECK(from({{"DISTCOMM_LOG", "info"}}).log == log_level::info);
    CHECK(from({{"DISTCOMM_LOG", "debug"}}).log == log_level::debug);
    CHECK(from({{"DISTCOMM_LOG", "Debug"}}).log == log_level::debug);  // case-insensitive
  }
  SUBCASE("DISTCOMM_AUTOTUNE") {
    const config c = from({{"DISTCOMM_AUTOTUNE", "1"},
                           {"DISTCOMM_AUTOTUNE_FILE", "/tmp/choice.json"},
                           {"DISTCOMM_AUTOTUNE_STEPS", "3"}});
    CHECK(c.autotune);
    CHECK(c.autotune_file == "/tmp/choice.json");
    CHECK(c.autotune_steps == 3);
    CHECK_FALSE(config{}.autotune);
  }
  SUBCASE("DISTCOMM_IFACE") {
    CHECK(from({{"DISTCOMM_IFACE", "eth0"}}).iface == "eth0");
    CHECK(from({{"DISTCOMM_IFACE", "10.1.0.0/24"}}).iface == "10.1.0.0/24");
    CHECK(config{}.iface.empty());
  }
  SUBCASE("DISTCOMM_HIERARCHICAL") {
    CHECK(config{}.hierarchical == "auto");
    CHECK(from({{"DISTCOMM_HIERARCHICAL", "off"}}).hierarchical == "off");
    CHECK(from({{"DISTCOMM_HIERARCHICAL", "AUTO"}}).hierarchical == "auto");
    CHECK(from({{"DISTCOMM_HIERARCHICAL", "64K"}}).hierarchical == "64K");
  }
  SUBCASE("DISTCOMM_PLUGIN_PATH, DISTCOMM_PLUGIN_OPTIONS") {
    const config c = from({{"DISTCOMM_PLUGIN_PATH", "/opt/a:/opt/b"},
                           {"DISTCOMM_PLUGIN_OPTIONS", "lanes=2 verbose"}});
    CHECK(c.plugin_path == "/opt/a:/opt/b");
    CHECK(c.plugin_options == "lanes=2 verbose");
  }
}

TEST_CASE("config: a garbage value raises invalid_argument_error naming variable and value") {
  const std::multimap<std::string, std::string> garbage = {
      {"DISTCOMM_TIMEOUT", "abc"},
      {"DISTCOMM_TIMEOUT", "0"},
      {"DISTCOMM_TIMEOUT", "-5"},
      {"DISTCOMM_TIMEOUT", "30s"},
      {"DISTCOMM_TIMEOUT", "inf"},
      {"DISTCOMM_TIMEOUT", "nan"},
      {"DISTCOMM_TIMEOUT", "1e999"},
      {"DISTCOMM_TIMEOUT", "1e300"},  // finite, but past what a deadline can hold
      {"DISTCOMM_STALL_WARNING", "1e300"},
      {"DISTCOMM_CYCLE_TIME", "1e300"},
      {"DISTCOMM_FLIGHT_RECORDER", "1000001"},
      {"DISTCOMM_FUSION_THRESHOLD", "lots"},
      {"DISTCOMM_FUSION_THRESHOLD", "-1"},
      {"DISTCOMM_FUSION_THRESHOLD", "64Q"},
      {"DISTCOMM_FUSION_CUTOFF", "lots"},
      {"DISTCOMM_FUSION_CUTOFF", "-1"},
      {"DISTCOMM_FUSION_THRESHOLD", "1.5M"},
      {"DISTCOMM_FUSION_THRESHOLD", "99999999999999999999"},
      {"DISTCOMM_SEGMENT_SIZE", "big"},
      {"DISTCOMM_SEGMENT_SIZE", "63"},  // below the 64-byte minimum
      {"DISTCOMM_SEGMENT_SIZE", "0"},
      {"DISTCOMM_SEGMENT_SIZE", "4T"},
      {"DISTCOMM_SEGMENT_SIZE", "max"},  // a segment must be bounded
      {"DISTCOMM_SEGMENT_SIZE", "2G"},   // above the 1G maximum
      {"DISTCOMM_PS_SERVERS", "two"},
      {"DISTCOMM_PS_SERVERS", "-1"},
      {"DISTCOMM_PS_SERVERS", "1.5"},
      {"DISTCOMM_PS_SERVERS", "3x"},
      {"DISTCOMM_PS_SERVERS", "1000001"},
      {"DISTCOMM_PS_SERVERS", "99999999999999999999"},
      {"DISTCOMM_ALGO", "fast:0-max"},
      {"DISTCOMM_ALGO", "tree:0-64K;ring:32K-max"},
      {"DISTCOMM_ALGO", "tree"},
      {"DISTCOMM_ALGO", ";"},
      {"DISTCOMM_DETERMINISTIC", "2"},
      {"DISTCOMM_DETERMINISTIC", "maybe"},
      {"DISTCOMM_MISMATCH_CHECK", "sometimes"},
      {"DISTCOMM_BACKEND", "t/cp"},  // a plugin's name has no '/'
      {"DISTCOMM_BACKEND", "local "},
      {"DISTCOMM_BACKEND", "plugin:"},
      {"DISTCOMM_STRATEGY", "fastest"},
      {"DISTCOMM_STRATEGY", "Ring"},
      {"DISTCOMM_LOG", "verbose"},
      {"DISTCOMM_IFACE", "eth0 eth1"},
      {"DISTCOMM_HIERARCHICAL", "sometimes"},
      {"DISTCOMM_HIERARCHICAL", "64Q"},
      {"DISTCOMM_LOG", "trace"},
      {"DISTCOMM_CYCLE_TIME", "fast"},
      {"DISTCOMM_CYCLE_TIME", "0"},
      {"DISTCOMM_CYCLE_TIME", "-1"},
      {"DISTCOMM_STALL_WARNING", "soon"},
      {"DISTCOMM_STALL_WARNING", "-3"},
      {"DISTCOMM_TIMELINE", "/tmp/trace.%d.json"},  // only %r is replaced
      {"DISTCOMM_FLIGHT_RECORDER", "lots"},
      {"DISTCOMM_FLIGHT_RECORDER", "-1"},
      {"DISTCOMM_DUMP_DIR", "/nonexistent/distcomm-dumps"},
      {"DISTCOMM_DUMP_DIR", "/proc/self/status"},  // a file, not a directory
      {"DISTCOMM_AUTOTUNE", "sometimes"},
      {"DISTCOMM_AUTOTUNE_FILE", "/proc"},                     // a directory
      {"DISTCOMM_AUTOTUNE_FILE", "/nonexistent/choice.json"},  // in no directory
      {"DISTCOMM_AUTOTUNE_STEPS", "0"},
      {"DISTCOMM_AUTOTUNE_STEPS", "many"},
      {"DISTCOMM_PLUGIN_PATH", "/opt/a\n/opt/b"},
      {"DISTCOMM_PLUGIN_OPTIONS", "lanes=2\r"},
  };
  std::set<std::string> covered;
  for (const auto& [name, value] : garbage) {
    CAPTURE(name);
    CAPTURE(value);
    const std::string m = invalid_of([&] { from({{name, value}}); });
    CHECK_HAS(m, name);
    CHECK_HAS(m, "'" + value + "'");
    covered.insert(name);
  }
  // Every documented variable has at least one garbage case above.
  for (const setting_info& s : settings()) {
    CAPTURE(s.name);
    CHECK(covered.count(s.name) == 1);
  }
}

TEST_CASE("config: a bad size inside DISTCOMM_ALGO names the variable and the bad part") {
  const std::string m = invalid_of([] { from({{"DISTCOMM_ALGO", "tree:0-64Q;ring:64K-max"}}); });
  CHECK_HAS(m, "DISTCOMM_ALGO");
  CHECK_HAS(m, "64Q");
}

// ---- to_string and settings() ----------------------------------------------------------------

TEST_CASE("config: to_string has one NAME=value line per setting, in settings() order") {
  const std::string text = config{}.to_string();
  std::istringstream lines(text);
  std::string line;
  std::size_t i = 0;
  while (std::getline(lines, line)) {
    REQUIRE(i < settings().size());
    CHECK(line.rfind(std::string(settings()[i].name) + "=", 0) == 0);
    ++i;
  }
  CHECK(i == settings().size());
  for (const setting_info& s : settings()) {
    CAPTURE(s.name);
    CHECK_HAS(text, s.name);
    CHECK(std::string(s.default_value).size() > 0);
    CHECK(std::string(s.description).size() > 10);
  }
}

TEST_CASE("config: to_string shows the values, and its output reads back to the same config") {
  const env e = {{"DISTCOMM_TIMEOUT", "2.5"},
                 {"DISTCOMM_FUSION_THRESHOLD", "1M"},
                 {"DISTCOMM_FUSION_CUTOFF", "262144"},
                 {"DISTCOMM_SEGMENT_SIZE", "65536"},
                 {"DISTCOMM_PS_SERVERS", "0"},
                 {"DISTCOMM_ALGO", "ps:0-1K;native:1K-1M;ring:1M-max"},
                 {"DISTCOMM_DETERMINISTIC", "on"},
                 {"DISTCOMM_MISMATCH_CHECK", "off"},
                 {"DISTCOMM_BACKEND", "mpi"},
                 {"DISTCOMM_STRATEGY", "recursive_doubling"},
                 {"DISTCOMM_LOG", "debug"}};
  const std::string text = from(e).to_string();
  CHECK_HAS(text, "DISTCOMM_TIMEOUT=2.5\n");
  CHECK_HAS(text, "DISTCOMM_FUSION_THRESHOLD=1M\n");
  CHECK_HAS(text, "DISTCOMM_FUSION_CUTOFF=256K\n");
  CHECK_HAS(text, "DISTCOMM_SEGMENT_SIZE=64K\n");
  CHECK_HAS(text, "DISTCOMM_PS_SERVERS=0\n");
  CHECK_HAS(text, "DISTCOMM_ALGO=ps:0-1K;native:1K-1M;ring:1M-max\n");
  CHECK_HAS(text, "DISTCOMM_DETERMINISTIC=1\n");
  CHECK_HAS(text, "DISTCOMM_MISMATCH_CHECK=0\n");
  CHECK_HAS(text, "DISTCOMM_BACKEND=mpi\n");
  CHECK_HAS(text, "DISTCOMM_STRATEGY=rd\n");
  CHECK_HAS(text, "DISTCOMM_LOG=debug\n");
  env back;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto eq = line.find('=');
    REQUIRE(eq != std::string::npos);
    back[line.substr(0, eq)] = line.substr(eq + 1);
  }
  CHECK(from(back).to_string() == text);
}

TEST_CASE("config: README.md has a table row for every setting") {
  const std::string path = std::string(DISTCOMM_SOURCE_DIR) + "/README.md";
  std::ifstream in(path);
  INFO("reading " << path);
  REQUIRE_MESSAGE(in.good(), "README.md is missing: it must document every DISTCOMM_* setting");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  std::set<std::string> documented;
  for (const auto* table : {&settings(), &rendezvous_settings()}) {
    for (const setting_info& s : *table) {
      CAPTURE(s.name);
      CHECK_HAS(readme, "| `" + std::string(s.name) + "` |");
      documented.insert(s.name);
    }
  }
  // And no row documents a variable the library does not read.
  std::istringstream lines(readme);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("| `DISTCOMM_", 0) != 0) continue;
    const std::string name = line.substr(3, line.find('`', 3) - 3);
    CAPTURE(line);
    CHECK(documented.count(name) == 1);
  }
}

// ---- unknown DISTCOMM_* variables -------------------------------------------------------------

TEST_CASE("unknown_settings: a misspelt setting is named with the closest known one") {
  const auto w = unknown_settings({"PATH=/bin", "DISTCOMM_TIMOUT=5", "DISTCOMM_TIMEOUT=5"});
  REQUIRE(w.size() == 1);
  CHECK(w[0] ==
        "DISTCOMM_TIMOUT is not a DistComm setting and is ignored; did you mean DISTCOMM_TIMEOUT?");
  CHECK_HAS(unknown_settings({"DISTCOMM_FUSION_TRESHOLD=1M"}).at(0),
            "did you mean DISTCOMM_FUSION_THRESHOLD?");
  CHECK_HAS(unknown_settings({"DISTCOMM_RANKS=2"}).at(0), "did you mean DISTCOMM_RANK?");
  CHECK_HAS(unknown_settings({"DISTCOMM_MASTERPORT"}).at(0), "did you mean DISTCOMM_MASTER_PORT?");
  CHECK_HAS(unknown_settings({"DISTCOMM_MPI_RUN=x"}).at(0), "did you mean DISTCOMM_MPIRUN?");
  // Every unknown variable is named, in the environment's order.
  const auto two =
      unknown_settings({"DISTCOMM_BACKND=gloo", "DISTCOMM_LOG=info", "DISTCOMM_ALG=x"});
  REQUIRE(two.size() == 2);
  CHECK_HAS(two[0], "DISTCOMM_BACKND is not");
  CHECK_HAS(two[1], "did you mean DISTCOMM_ALGO?");
}

TEST_CASE("unknown_settings: nothing near is suggested, and the message says where to look") {
  const auto w = unknown_settings({"DISTCOMM_FOO=1", "DISTCOMM_=1"});
  REQUIRE(w.size() == 2);
  CHECK(w[0] ==
        "DISTCOMM_FOO is not a DistComm setting and is ignored (README.md, Settings, "
        "lists every setting)");
  CHECK(w[1].find("did you mean") == std::string::npos);
}

TEST_CASE("unknown_settings: every variable DistComm reads is known, others are not its business") {
  std::vector<std::string> environment = {"RANK=0", "distcomm_timeout=1", "XDISTCOMM_A=1"};
  for (const auto* table : {&settings(), &rendezvous_settings()}) {
    for (const setting_info& s : *table) environment.push_back(std::string(s.name) + "=1");
  }
  CHECK(unknown_settings(environment).empty());
  // Read by the tools and the project's scripts, not by config; the scan below finds them.
  for (const char* name : {"DISTCOMM_MPIRUN", "DISTCOMM_JOBS", "DISTCOMM_SKIP_PACKAGES",
                           "DISTCOMM_CACHE", "DISTCOMM_KEEP_TMP", "DISTCOMM_FUZZ_CXX"}) {
    CAPTURE(name);
    CHECK(unknown_settings({std::string(name) + "=1"}).empty());
  }
}

TEST_CASE("unknown_settings: every DISTCOMM_* variable the sources and scripts read is known") {
  // config::read_variable("DISTCOMM_X", ...), env.get("DISTCOMM_X"), get("DISTCOMM_X", v) in C++;
  // ${DISTCOMM_X:-...}
  // or "$DISTCOMM_X" in shell (CMake's own DISTCOMM_* variables are not environment variables).
  const std::regex read_in_cpp(R"re((?:get(?:env)?|read_variable)\("(DISTCOMM_[A-Z0-9_]+)")re");
  const std::regex read_in_shell(R"re(\$\{?(DISTCOMM_[A-Z0-9_]+)[:}"])re");
  const std::set<std::string> shell_locals = {"DISTCOMM_ROOT", "DISTCOMM_PHASES",
                                              "DISTCOMM_PACKAGES", "DISTCOMM_START_SECONDS"};
  namespace fs = std::filesystem;
  std::set<std::string> found;
  for (const char* dir :
       {"src", "backends", "tools", "bench", "examples", "scripts", "fuzz", "plugins", "tests"}) {
    const fs::path root = fs::path(DISTCOMM_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& f : fs::recursive_directory_iterator(root)) {
      const std::string ext = f.path().extension().string();
      const bool cpp = ext == ".cpp" || ext == ".hpp" || ext == ".cu";
      if (!f.is_regular_file() || (!cpp && ext != ".sh")) continue;
      // The tests name unknown variables on purpose; only their scripts count.
      if (cpp && f.path().string().find("/tests/") != std::string::npos) continue;
      std::ifstream in(f.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string body = text.str();
      const std::regex& re = cpp ? read_in_cpp : read_in_shell;
      for (std::sregex_iterator m(body.begin(), body.end(), re), end; m != end; ++m) {
        if (shell_locals.count((*m)[1]) == 0) found.insert((*m)[1]);
      }
    }
  }
  CHECK(found.count("DISTCOMM_TIMEOUT") == 1);  // the scan finds what it looks for
  CHECK(found.count("DISTCOMM_MPIRUN") == 1);
  CHECK(found.count("DISTCOMM_JOBS") == 1);
  for (const std::string& name : found) {
    CAPTURE(name);
    CHECK(unknown_settings({name + "=1"}).empty());
  }
}

TEST_CASE("config: read_variable reads documented variables only") {
  const auto lookup = [](const char* name) -> const char* {
    return std::string(name) == "DISTCOMM_STORE_ADDR" ? "10.0.0.1:29500" : nullptr;
  };
  CHECK(std::string(config::read_variable("DISTCOMM_STORE_ADDR", lookup)) == "10.0.0.1:29500");
  CHECK(config::read_variable("DISTCOMM_AUTH_TOKEN", lookup) == nullptr);
  CHECK(config::read_variable("DISTCOMM_TIMEOUT", lookup) == nullptr);
  try {
    (void)config::read_variable("DISTCOMM_UNDOCUMENTED", lookup);
    FAIL("an undocumented variable was read");
  } catch (const std::logic_error& e) {
    CHECK_HAS(std::string(e.what()), "DISTCOMM_UNDOCUMENTED is not a DistComm setting");
  }
}

namespace {

// A C++ line that reads a DISTCOMM_* variable from the environment itself: getenv or
// std::getenv with the name written in, quoted or escaped.
bool reads_environment(const std::string& line) {
  static const std::regex read(R"re(getenv\s*\(\s*\\?"DISTCOMM_)re");
  return std::regex_search(line, read);
}

}  // namespace

TEST_CASE(
    "config: no DISTCOMM_* variable is read from the environment outside src/settings.cpp and "
    "src/config.cpp") {
  // The pattern finds what it looks for, and not config's own reader.
  CHECK(reads_environment(R"(const char* v = std::getenv("DISTCOMM_IFACE");)"));
  CHECK(reads_environment(R"(if (getenv ( "DISTCOMM_X") != nullptr))"));
  CHECK(reads_environment("x = \"getenv(\\\"DISTCOMM_X\\\")\";"));  // inside a string
  CHECK_FALSE(reads_environment(R"(config::read_variable("DISTCOMM_X", getenv))"));
  CHECK_FALSE(reads_environment(R"(std::getenv("UCX_NET_DEVICES"))"));
  namespace fs = std::filesystem;
  const fs::path source(DISTCOMM_SOURCE_DIR);
  std::vector<std::string> readers;
  std::size_t files = 0;
  for (const char* dir :
       {"include", "src", "backends", "plugins", "cuda", "bindings", "tools", "init"}) {
    const fs::path root = source / dir;
    if (!fs::exists(root)) continue;
    for (const auto& f : fs::recursive_directory_iterator(root)) {
      const std::string ext = f.path().extension().string();
      if (!f.is_regular_file() ||
          (ext != ".cpp" && ext != ".hpp" && ext != ".h" && ext != ".cu" && ext != ".cc")) {
        continue;
      }
      const fs::path relative = f.path().lexically_relative(source);
      if (relative == fs::path("src/config.cpp") || relative == fs::path("src/settings.cpp"))
        continue;
      ++files;
      std::ifstream in(f.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        if (reads_environment(line)) readers.push_back(relative.string() + ":" + std::to_string(n));
      }
    }
  }
  CHECK(files > 100);  // the sources were found
  std::string list;
  for (const std::string& r : readers) list += "\n  " + r;
  INFO(
      "read it through config instead (a field filled by config::from_env, or "
      "config::read_variable for a variable rendezvous_settings() documents):"
      << list);
  CHECK(readers.empty());
}

namespace {

// What f writes to stderr (file descriptor 2).
template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/distcomm-test-config-XXXXXX";
  const int file = ::mkstemp(path);
  REQUIRE(file >= 0);
  const int saved = ::dup(2);
  ::dup2(file, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::close(file);
  ::unlink(path);
  return text.str();
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("config: from_env() warns about an unknown variable once per process, through the log") {
  ::setenv("DISTCOMM_TIMOUT", "5", 1);
  const std::string err = stderr_of([] {
    (void)config::from_env();
    (void)config::from_env();
  });
  ::setenv("DISTCOMM_BACKNED", "gloo", 1);  // a new one is still named, the old one not again
  const std::string later = stderr_of([] { (void)config::from_env(); });
  ::unsetenv("DISTCOMM_TIMOUT");
  ::unsetenv("DISTCOMM_BACKNED");
  CHECK(count_of(err,
                 "[distcomm warn] DISTCOMM_TIMOUT is not a DistComm setting and is ignored; "
                 "did you mean DISTCOMM_TIMEOUT?\n") == 1);
  CHECK(count_of(later, "DISTCOMM_TIMOUT") == 0);
  CHECK(count_of(later, "[distcomm warn] DISTCOMM_BACKNED is not a DistComm setting") == 1);
}

// ---- algo_table ------------------------------------------------------------------------------

TEST_CASE("algo_table: parse and pick at the boundaries") {
  const algo_table t = algo_table::parse("tree:0-64K;ring:64K-max", "DISTCOMM_ALGO");
  REQUIRE(t.ranges().size() == 2);
  CHECK(t.ranges()[0].algo == algorithm::tree);
  CHECK(t.ranges()[0].lo == 0);
  CHECK(t.ranges()[0].hi == 65536);
  CHECK(t.ranges()[1].algo == algorithm::ring);
  CHECK(t.ranges()[1].lo == 65536);
  CHECK(t.ranges()[1].hi == unbounded);
  CHECK(t.pick(0, algorithm::native) == algorithm::tree);
  CHECK(t.pick(65535, algorithm::native) == algorithm::tree);
  CHECK(t.pick(65536, algorithm::native) == algorithm::ring);
  CHECK(t.pick(unbounded - 1, algorithm::native) == algorithm::ring);
  CHECK(t.uses(algorithm::tree));
  CHECK(t.uses(algorithm::ring));
  CHECK_FALSE(t.uses(algorithm::native));
  CHECK(t.to_string() == "tree:0-64K;ring:64K-max");
}

TEST_CASE("algo_table: names, whitespace, case, ordering and gaps") {
  const algo_table t = algo_table::parse(
      " RING : 1M - max ; ps:0-1K;; parameter_server:1K-4K ;native:8K-1M;", "DISTCOMM_ALGO");
  REQUIRE(t.ranges().size() == 4);
  // Sorted by lower bound whatever the order in the text.
  CHECK(t.to_string() == "ps:0-1K;ps:1K-4K;native:8K-1M;ring:1M-max");
  CHECK(t.pick(1023, algorithm::tree) == algorithm::parameter_server);
  CHECK(t.pick(4095, algorithm::tree) == algorithm::parameter_server);
  CHECK(t.pick(4096, algorithm::tree) == algorithm::tree);  // the gap: fallback
  CHECK(t.pick(8191, algorithm::tree) == algorithm::tree);
  CHECK(t.pick(8192, algorithm::tree) == algorithm::native);
  CHECK(t.pick(std::size_t{1} << 20, algorithm::tree) == algorithm::ring);
  // to_string reads back to the same table.
  CHECK(algo_table::parse(t.to_string(), "x").to_string() == t.to_string());
  // An empty table picks the fallback.
  CHECK(algo_table{}.pick(5, algorithm::tree) == algorithm::tree);
  CHECK(algo_table{}.empty());
}

TEST_CASE("algo_table: parse rejects bad text with a message naming the source") {
  struct bad_case {
    const char* text;
    const char* why;
  };
  const bad_case cases[] = {
      {"fast:0-64K", "unknown algorithm 'fast'"},
      {"tree:0-64K;ring:32K-max", "overlap"},
      {"tree:0-64K;ring:0-1K", "overlap"},
      {"tree:64K-64K", "empty range"},
      {"tree:1M-1K", "empty range"},
      {"ring:max-max", "empty range"},
      {"tree0-64K", "no ':'"},
      {"tree:64K", "no lo-hi range"},
      {"tree:-64K", "not a byte size"},
      {"tree:0-", "not a byte size"},
      {"tree:0-64Q", "64Q"},
      {"tree:0-64K-1M", "not a byte size"},
      {"", "no entries"},
      {" ; ;", "no entries"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.text);
    const std::string m = invalid_of([&] { (void)algo_table::parse(c.text, "DISTCOMM_ALGO"); });
    CHECK_HAS(m, "DISTCOMM_ALGO");
    CHECK_HAS(m, c.why);
  }
}

TEST_CASE("algo_table: the constructor sorts and validates") {
  const algo_table t({{algorithm::ring, 100, unbounded}, {algorithm::tree, 0, 100}});
  CHECK(t.to_string() == "tree:0-100;ring:100-max");
  CHECK_HAS(invalid_of([] {
              algo_table({{algorithm::ring, 0, 10}, {algorithm::tree, 5, 20}});
            }),
            "overlap");
  CHECK_HAS(invalid_of([] { algo_table({{algorithm::ring, 10, 10}}); }), "empty range");
  CHECK(std::string(to_string(algorithm::parameter_server)) == "ps");
  CHECK(std::string(to_string(algorithm::native)) == "native");
  CHECK(std::string(to_string(algorithm::recursive_doubling)) == "rd");
  CHECK(algo_table::parse("rd:0-4K;recursive_doubling:4K-8K", "DISTCOMM_ALGO").to_string() ==
        "rd:0-4K;rd:4K-8K");
}

// ---- parse_bytes -----------------------------------------------------------------------------

TEST_CASE("parse_bytes: numbers, suffixes and case") {
  CHECK(parse_bytes("0", "S") == 0);
  CHECK(parse_bytes("4096", "S") == 4096);
  CHECK(parse_bytes("7b", "S") == 7);
  CHECK(parse_bytes("7B", "S") == 7);
  for (const char* k : {"64K", "64k", "64KB", "64kb", "64KiB", "64kib", "64Kb"}) {
    CAPTURE(k);
    CHECK(parse_bytes(k, "S") == 65536);
  }
  for (const char* m : {"3M", "3m", "3MB", "3MiB"}) {
    CAPTURE(m);
    CHECK(parse_bytes(m, "S") == 3 * (std::size_t{1} << 20));
  }
  for (const char* g : {"2G", "2g", "2GB", "2gib"}) {
    CAPTURE(g);
    CHECK(parse_bytes(g, "S") == (std::size_t{2} << 30));
  }
  for (const char* m : {"max", "MAX", "Max", " max "}) {
    CAPTURE(m);
    CHECK(parse_bytes(m, "S") == unbounded);
  }
  CHECK(parse_bytes("  12K\t", "S") == 12288);  // surrounding blanks are ignored
  CHECK(parse_bytes("007", "S") == 7);
}

TEST_CASE("parse_bytes: overflow is rejected, the largest values are not") {
  CHECK(parse_bytes("18446744073709551615", "S") == unbounded);
  CHECK(parse_bytes("17179869183G", "S") == (std::size_t{17179869183} << 30));
  CHECK(parse_bytes("17592186044415M", "S") == (std::size_t{17592186044415} << 20));
  for (const char* big : {"18446744073709551616", "99999999999999999999999", "17179869184G",
                          "17592186044416M", "18014398509481984K"}) {
    CAPTURE(big);
    const std::string m = invalid_of([&] { (void)parse_bytes(big, "DISTCOMM_X"); });
    CHECK_HAS(m, "DISTCOMM_X");
    CHECK_HAS(m, big);
    CHECK_HAS(m, "too large");
  }
}

TEST_CASE("parse_bytes: a fraction is refused as a fraction, with the whole-unit spelling") {
  const std::string m = invalid_of([] { (void)from({{"DISTCOMM_FUSION_THRESHOLD", "1.5M"}}); });
  CHECK_HAS(m, "DISTCOMM_FUSION_THRESHOLD: '1.5M' is not a byte size");
  CHECK_HAS(m, "fractions are not accepted: write 1536K instead");
  CHECK(m.find("suffix") == std::string::npos);
  CHECK_HAS(invalid_of([] { (void)parse_bytes("0.5k", "X"); }), "write 512 instead");
  CHECK_HAS(invalid_of([] { (void)parse_bytes("2.25G", "X"); }), "write 2304M instead");
  CHECK_HAS(invalid_of([] { (void)parse_bytes("1.3M", "X"); }),
            "fractions are not accepted: write a whole number of bytes, K, M or G");
  CHECK_HAS(invalid_of([] { (void)parse_bytes("1.5", "X"); }), "fractions are not accepted");
}

TEST_CASE("parse_bytes: text that is not a size is rejected naming the source and the text") {
  for (const char* bad : {"", "   ", "K", "-1", "+5", "1.5K", "1 K", "1T", "0x10", "1KK", "12 34",
                          "maximum", "inf"}) {
    CAPTURE(bad);
    const std::string m = invalid_of([&] { (void)parse_bytes(bad, "DISTCOMM_X"); });
    CHECK_HAS(m, "DISTCOMM_X");
    CHECK_HAS(m, "'" + std::string(bad) + "'");
  }
}
