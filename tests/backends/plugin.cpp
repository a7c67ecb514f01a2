// The backend suite on a backend plugin (plugin_backend over libdistcomm_backend_<name>.so), the
// plugin named by DISTCOMM_BACKEND and found on DISTCOMM_PLUGIN_PATH. Ranks are processes
// (distcomm-run, mpirun), each backend started through the job's store, bootstrapped once when a
// plugin first needs it; or, with `--threads N`, N threads of this process (the local plugin,
// whose ranks must share a process). Installed as distcomm-backend-check: the contract tests a
// plugin author runs against a new transport.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "context.hpp"
#include "distcomm/plugin/plugin_backend.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace {

std::string the_plugin;
int the_threads = 0;  // 0: ranks are processes
distcomm::config the_config;

std::shared_ptr<distcomm::store> job_store() {
  static std::optional<distcomm::job> j;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (!j) j = distcomm::bootstrap(the_config);
  return j->kv;
}

struct plugin_env {
  using backend = distcomm::plugin_backend;
  // The ABI asks every plugin to retract a cancelled receive that no message matched yet.
  static constexpr bool cancel_retracts = true;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    if (the_threads > 0) return run_threads(body);
    const distcomm::world_info w = distcomm::detect_world();
    distcomm::plugin_backend::args a;
    a.rank = w.rank;
    a.size = w.size;
    a.local_rank = w.local_rank;
    a.local_size = w.local_size;
    a.kv = &job_store;
    if (const char* o = std::getenv("DISTCOMM_PLUGIN_OPTIONS")) a.options = o;
    backend_suite::rank_context<backend> ctx{
        w.rank, w.size, [a] { return backend::open(the_plugin, a, the_config); }};
    body(ctx);
  }

  // One thread per rank; the first failure is rethrown once every thread has ended (each rank's
  // own doctest checks are reported as they happen).
  static void run_threads(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    const int n = the_threads;
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> failures(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          distcomm::plugin_backend::args a;
          a.rank = r;
          a.size = n;
          backend_suite::rank_context<backend> ctx{
              r, n, [a] { return backend::open(the_plugin, a, the_config); }};
          body(ctx);
        } catch (...) {
          failures[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& f : failures) {
      if (f) std::rethrow_exception(f);
    }
  }
};

}  // namespace

TYPE_TO_STRING_AS("plugin", plugin_env);
#define DISTCOMM_SUITE_ENVS plugin_env
#include "suite.hpp"

int main(int argc, char** argv) {
  // --threads N (ours) is taken out before doctest sees the arguments.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      the_threads = std::atoi(argv[++i]);
      continue;
    }
    args.push_back(argv[i]);
  }
  the_config = distcomm::config::from_env();
  the_plugin = the_config.backend;
  the_plugin = distcomm::plugin::plugin_named(the_plugin);
  if (the_plugin.empty()) {
    std::fprintf(stderr,
                 "%s: set DISTCOMM_BACKEND to the plugin to test (its "
                 "libdistcomm_backend_<name>.so on DISTCOMM_PLUGIN_PATH); plugins found:",
                 argv[0]);
    for (const auto& p : distcomm::plugin::list()) {
      std::fprintf(stderr, " %s (%s)", p.name.c_str(), p.path.c_str());
    }
    std::fprintf(stderr, "\n");
    return 2;
  }
  doctest::Context ctx(static_cast<int>(args.size()), args.data());  // every rank reports its own
  return ctx.run();
}
