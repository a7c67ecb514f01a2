// The plugin loader and plugin_backend's errors: every failure names the file, the symbol and what
// to do. Broken plugins come from fixtures.c and store_fixtures.c; a working one is the local
// backend's plugin (a working store plugin, c10d's, is tested in test_store_c10d).
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/communicator.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/loader.hpp"
#include "distcomm/plugin/plugin_backend.hpp"
#include "distcomm/plugin/store_abi.hpp"
#include "distcomm/plugin/store_plugin.hpp"
#include "distcomm/rendezvous/store_url.hpp"

namespace dc = distcomm;
namespace pl = distcomm::plugin;

namespace {

const std::string fixtures = DISTCOMM_FIXTURE_DIR;

#define CHECK_HAS(text, part) CHECK_MESSAGE((text).find(part) != std::string::npos, (text))

// A lookup with only DISTCOMM_PLUGIN_PATH set.
pl::env_lookup env_with_path(std::string path) {
  return [path](const char* name) -> const char* {
    return std::string(name) == "DISTCOMM_PLUGIN_PATH" ? path.c_str() : nullptr;
  };
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no exception of the expected type");
  return {};
}

std::string fixture(const char* kind) { return fixtures + "/" + pl::file_name(kind); }

dc::plugin_backend::args alone() {
  dc::plugin_backend::args a;
  a.rank = 0;
  a.size = 1;
  return a;
}

}  // namespace

TEST_CASE("plugin loader: the search path is DISTCOMM_PLUGIN_PATH first, without duplicates") {
  const auto dirs = pl::search_path(env_with_path("/a:/b::/a"));
  REQUIRE(dirs.size() >= 2);
  CHECK(dirs[0] == "/a");
  CHECK(dirs[1] == "/b");
  CHECK(std::count(dirs.begin(), dirs.end(), "/a") == 1);
  // A program of the build tree also looks in the tree's lib folder, after the installation's.
  CHECK(std::count(dirs.begin(), dirs.end(), DISTCOMM_BUILD_LIB_DIR) == 1);
  CHECK(pl::file_name("tcp") == "libdistcomm_backend_tcp.so");
}

TEST_CASE("plugin loader: list() names every plugin visible, first folder wins") {
  const auto found = pl::list(env_with_path(fixtures + ":" + DISTCOMM_BUILD_LIB_DIR));
  std::map<std::string, std::string> by_name;
  for (const auto& a : found) by_name[a.name] = a.path;
  CHECK(by_name["badversion"] == fixture("badversion"));
  CHECK(by_name["local"] == std::string(DISTCOMM_BUILD_LIB_DIR) + "/libdistcomm_backend_local.so");
}

TEST_CASE("plugin loader: a missing plugin names the file, the folders searched and the fix") {
  const std::string m =
      error_of<dc::invalid_argument_error>([] { pl::load("nosuch", env_with_path(fixtures)); });
  CHECK_HAS(m, "'nosuch' not found");
  CHECK_HAS(m, "libdistcomm_backend_nosuch.so");
  CHECK_HAS(m, fixtures);
  CHECK_HAS(m, "DISTCOMM_PLUGIN_PATH='" + fixtures + "'");
  CHECK_HAS(m, "badversion");  // the plugins that are there
  CHECK_HAS(m, "add the folder holding it to DISTCOMM_PLUGIN_PATH");
}

TEST_CASE("plugin loader: a file dlopen refuses names the file and dlopen's reason") {
  const std::string path = fixtures + "/libdistcomm_backend_garbage.so";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("not a shared object\n", f);
    std::fclose(f);
  }
  const std::string m =
      error_of<dc::invalid_argument_error>([] { pl::load("garbage", env_with_path(fixtures)); });
  std::remove(path.c_str());
  CHECK_HAS(m, path + " cannot be loaded");
  CHECK_HAS(m, "ldd " + path);
  CHECK_HAS(m, "libdistcomm_backend_garbage.so:");  // dlerror() names the file too
}

TEST_CASE("plugin loader: a shared object without the ABI symbol names the symbols tried") {
  const std::string m =
      error_of<dc::invalid_argument_error>([] { pl::load("nosymbol", env_with_path(fixtures)); });
  CHECK_HAS(m, fixture("nosymbol"));
  CHECK_HAS(m, "exports none of the entry points distcomm_backend_plugin_v1");
  CHECK_HAS(m, "rebuild it against this DistComm's distcomm_backend_v1.h");
}

TEST_CASE("plugin loader: a table of another version names the version and the symbol") {
  const std::string m =
      error_of<dc::invalid_argument_error>([] { pl::load("badversion", env_with_path(fixtures)); });
  CHECK_HAS(m, fixture("badversion") + " (distcomm_backend_plugin_v1)");
  CHECK_HAS(m, "version 99, expected 1");
  CHECK_HAS(m, "Rebuild the plugin");
}

TEST_CASE("plugin loader: a table without a required function names it") {
  const std::string m =
      error_of<dc::invalid_argument_error>([] { pl::load("incomplete", env_with_path(fixtures)); });
  CHECK_HAS(m, fixture("incomplete"));
  CHECK_HAS(m, "lacks required functions: isend");
}

TEST_CASE(
    "plugin loader: a plugin's declaration of what it can do, or what one without is taken for") {
  const pl::library declared = pl::load("declared", env_with_path(fixtures));
  REQUIRE(declared.declared() != nullptr);
  const dc::backend_traits t = pl::traits_of(declared);
  CHECK(std::string(t.name()) == "fixture");
  CHECK(std::string(t.summary()) == "a fixture that declares itself");
  CHECK(t.memory() == dc::memory_kind::host);
  CHECK(t.capabilities() ==
        (dc::capability::processes | dc::capability::store | dc::capability::grow));
  // Without a declaration: processes meeting through the store, and nothing more (no grow).
  const pl::library silent = pl::load("initfails", env_with_path(fixtures));
  CHECK(silent.declared() == nullptr);
  const dc::backend_traits s = pl::traits_of(silent);
  CHECK(s.capabilities() == (dc::capability::processes | dc::capability::store));
  CHECK(!s.can(dc::capability::grow));
  CHECK(pl::traits_of(pl::load("device", env_with_path(fixtures))).memory() ==
        dc::memory_kind::cuda);
}

TEST_CASE(
    "plugin loader: a declaration of another version, or of unknown capabilities, is refused") {
  const std::string old = error_of<dc::invalid_argument_error>(
      [] { pl::load("olddeclared", env_with_path(fixtures)); });
  CHECK_HAS(old, fixture("olddeclared") + " (distcomm_backend_plugin_v1_traits)");
  CHECK_HAS(old, "declaration of version 99");
  const std::string over = error_of<dc::invalid_argument_error>(
      [] { pl::load("overdeclared", env_with_path(fixtures)); });
  CHECK_HAS(over, "declares capabilities this DistComm does not know");
}

namespace {
// The lines the program's log received (through a sink, as a framework would install one).
std::vector<std::pair<dc::log_level, std::string>> logged;
}  // namespace

TEST_CASE("plugin_backend: an init that fails raises the plugin's error kind and text") {
  logged.clear();
  dc::set_log_sink([](void*, dc::log_level l, const char* m) { logged.emplace_back(l, m); },
                   nullptr);
  const std::string m = error_of<dc::rendezvous_error>(
      [] { dc::plugin_backend::open(fixture("initfails"), alone(), dc::config{}); });
  dc::set_log_sink(nullptr, nullptr);
  CHECK_HAS(m, fixture("initfails"));
  CHECK_HAS(m, "('fixture') failed to initialise rank 0 of 1");
  CHECK_HAS(m, "cannot reach the fabric manager at 10.0.0.1");
  // What the plugin logged went to the program's log, at its level.
  REQUIRE(logged.size() == 1);
  CHECK(logged[0].first == dc::log_level::warn);
  CHECK(logged[0].second == "fixture: looking for the fabric manager");
}

TEST_CASE("plugin_backend: a plugin of device memory is refused by name") {
  const std::string m = error_of<dc::invalid_argument_error>(
      [] { dc::plugin_backend::open(fixture("device"), alone(), dc::config{}); });
  CHECK_HAS(m, fixture("device"));
  CHECK_HAS(m, "moves CUDA device memory");
}

TEST_CASE("plugin_backend: a size, rank or request no transport could return is a named error") {
  for (const char* kind : {"zerosize", "badrank"}) {
    CAPTURE(kind);
    const std::string m = error_of<dc::backend_error>(
        [&] { dc::plugin_backend::open(fixture(kind), alone(), dc::config{}); });
    CHECK_HAS(m, fixture(kind));
    CHECK_HAS(m, "('fixture')");
    CHECK_HAS(m, std::string(kind) == "zerosize" ? "reports a world of 0 ranks"
                                                 : "reports rank 1 in a world of 1 ranks");
  }
  auto b = dc::plugin_backend::open(fixture("nullrequest"), alone(), dc::config{});
  float x = 1.0f;
  const std::string m = error_of<dc::backend_error>([&] { (void)b.isend(&x, sizeof x, 0, 5); });
  CHECK_HAS(m, fixture("nullrequest"));
  CHECK_HAS(m, "returned OK from isend without a request");
  CHECK_HAS(error_of<dc::backend_error>([&] { (void)b.irecv(&x, sizeof x, 0, 5); }),
            "returned OK from irecv without a request");
}

TEST_CASE("plugin_backend: the local plugin, a world of one, through a communicator") {
  // A plugin that never touches the store never makes the program connect to one.
  int stores_made = 0;
  dc::plugin_backend::args a = alone();
  a.kv = [&stores_made] {
    ++stores_made;
    return std::shared_ptr<dc::store>();
  };
  auto b = dc::plugin_backend::open(
      std::string(DISTCOMM_BUILD_LIB_DIR) + "/" + pl::file_name("local"), a, dc::config{});
  CHECK(stores_made == 0);
  CHECK(b.instance_name() == "local");
  CHECK(b.rank() == 0);
  CHECK(b.size() == 1);
  CHECK(b.plugin_has("allreduce"));
  CHECK(b.unreceived_messages_ok_now());
  dc::config c;
  b.fill_defaults(c);
  CHECK(c.algo.to_string() == "tree:0-128K;native:128K-max");  // the local backend's own table
  dc::communicator<dc::plugin_backend> comm(std::move(b), dc::config{});
  std::vector<float> v = {1.0f, 2.0f};
  comm.allreduce(dc::view(v));
  CHECK(v == std::vector<float>{1.0f, 2.0f});
  // The communicator's own messages name the plugin, not the adapter type.
  dc::tensor_view on_device = dc::view(v);
  on_device.memory = dc::memory_kind::cuda;
  CHECK_HAS(error_of<dc::invalid_argument_error>([&] { comm.allreduce(on_device); }),
            "backend 'local' moves host memory only");
  // A plugin's failure keeps its kind and names the plugin: a peer outside the world.
  int x = 0;
  const std::string m =
      error_of<dc::invalid_argument_error>([&] { (void)comm.backend().isend(&x, sizeof x, 5, 1); });
  CHECK_HAS(m, "local");
}

TEST_CASE("plugin_backend: open on the world and store of a job the program bootstrapped") {
  dc::job j;  // what bootstrap() gives a world of one: no store
  auto b = dc::plugin_backend::open(
      std::string(DISTCOMM_BUILD_LIB_DIR) + "/" + pl::file_name("local"), j, dc::config{});
  CHECK(b.rank() == 0);
  CHECK(b.size() == 1);
}

// ---- store plugins (libdistcomm_store_<scheme>.so, store_fixtures.c) ----------------------------

namespace {

dc::store_request store_url(const std::string& url) {
  dc::store_request r = dc::parse_store_url(url);
  r.timeout = std::chrono::duration<double>(2.5);
  r.rank = 3;
  return r;
}

}  // namespace

TEST_CASE("store plugins: a missing one names the file, the folders, the plugins there") {
  const std::string m = error_of<dc::rendezvous_error>(
      [] { pl::open_plugin_store(store_url("nosuch://h:1/p"), env_with_path(fixtures)); });
  CHECK_HAS(m,
            "rank 3: the store nosuch://h:1/p needs the store plugin libdistcomm_store_nosuch.so");
  CHECK_HAS(m, fixtures);
  CHECK_HAS(m, "openfails");                        // the store plugins that are there
  CHECK(m.find("initfails") == std::string::npos);  // not the backend plugins
  CHECK_HAS(m, "built in: etcd");
  // The c10d store plugin's own hint (it needs libtorch), where it was not built: a tree with
  // the torch binding has it beside the loader, which then finds it and dials h:1.
  if (::access((std::string(DISTCOMM_BUILD_LIB_DIR) + "/libdistcomm_store_c10d.so").c_str(),
               F_OK) != 0) {
    CHECK_HAS(error_of<dc::rendezvous_error>([] {
                pl::open_plugin_store(store_url("c10d://h:1/p"), env_with_path(fixtures));
              }),
              "libtorch");
  } else {
    MESSAGE("the c10d store plugin was built here: its missing-plugin hint is not checked");
  }
  CHECK_HAS(error_of<dc::rendezvous_error>(
                [] { pl::open_plugin_store(store_url("../x://h:1"), env_with_path(fixtures)); }),
            "is not a store's name");
  CHECK_HAS(error_of<dc::rendezvous_error>([] { dc::parse_store_url("h:1/p"); }),
            "is not <scheme>://<address>");
}

TEST_CASE("store plugins: a broken one is refused by name, an opened store that is not closed") {
  const auto open = [](const char* scheme) {
    pl::open_plugin_store(store_url(std::string(scheme) + "://h:1"), env_with_path(fixtures));
  };
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { open("nosymbol"); }),
            "exports no distcomm_store_plugin_v1");
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { open("badversion"); }), "of version 99");
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { open("otherscheme"); }),
            "serves the scheme 'other', not 'otherscheme'");
  // open()'s failure keeps its kind and text, after its log line.
  const std::string m = error_of<dc::timeout_error>([&] { open("openfails"); });
  CHECK_HAS(m, "rank 3: the store openfails://h:1");
  CHECK_HAS(m, "fixture: no leader at h:1 after 2.5 s");
  // A store without every call is closed and refused.
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { open("incomplete"); }),
            "without set, get, add, check, wait or compare_set");
  void* h =
      ::dlopen((fixtures + "/libdistcomm_store_incomplete.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  const auto closed = reinterpret_cast<int (*)()>(::dlsym(h, "distcomm_store_fixture_closed"));
  REQUIRE(static_cast<bool>(closed));
  CHECK(closed() == 1);
  ::dlclose(h);
}

TEST_CASE("store plugins: bootstrap's DISTCOMM_STORE opens them once enable_store_plugins() ran") {
  dc::store_request r = store_url("nosuch://h:1/p");
  // Before: the scheme needs a plugin and this program has no loader installed.
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { dc::open_store(r); }), "no plugin loader");
  pl::enable_store_plugins();
  CHECK_HAS(error_of<dc::rendezvous_error>([&] { dc::open_store(r); }),
            "needs the store plugin libdistcomm_store_nosuch.so");
}

// A store plugin's get() says how large the value is when the buffer was too small, and the
// host asks again with room for it. That size is the plugin's word: one above any store's
// (store_max_value_bytes) is refused, naming the plugin as broken, never allocated.
namespace {
int huge_get(void*, const char*, int64_t, void*, size_t, size_t* size, distcomm_error_v1*) {
  *size = std::size_t{1} << 62;
  return DISTCOMM_V1_OK;
}
}  // namespace

TEST_CASE("store plugins: a value size the plugin claims above any store's is refused") {
  distcomm_store_v1 calls{};
  calls.get = &huge_get;
  pl::host_store s(calls, std::chrono::seconds(60));
  CHECK_THROWS_WITH_AS(s.get("k"),
                       doctest::Contains("the plugin says the value has 4611686018427387904 bytes"),
                       dc::rendezvous_error);
}
