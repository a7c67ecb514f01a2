// distcomm-run: starts N local processes of a program as the ranks of one DistComm job.
//   distcomm-run -np 4 [--backend B] [--timeout S] [--tag-output] [--print-world] [--] prog args...
// With --backend mpi the ranks are started by Open MPI's mpirun, which distcomm-run runs and
// watches in their place. See tools/README.md for every option, the environment the ranks get
// and the exit codes.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/plugin/loader.hpp"
#include "distcomm/registry/backends.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "environment.hpp"
#include "job.hpp"
#include "posix.hpp"

extern char** environ;

// The mpirun found when DistComm was configured (FindMPI's MPIEXEC_EXECUTABLE), if any.
#ifndef DISTCOMM_MPIRUN_DEFAULT
#define DISTCOMM_MPIRUN_DEFAULT ""
#endif

namespace {

using namespace distcomm::launcher;

struct options {
  int np = 0;
  std::string backend;
  double timeout = 0;
  double grace = 5;
  int master_port = 0;
  bool tag_output = false;
  bool print_world = false;
  bool print_config = false;
  bool no_auth = false;
  bool elastic = false;
  std::string mpirun;
};

// A failure with the launcher's exit code for it.
struct launch_failure : std::runtime_error {
  launch_failure(int c, const std::string& what) : std::runtime_error(what), code(c) {}
  int code;
};

void complain(const std::string& what) { std::fprintf(stderr, "distcomm-run: %s\n", what.c_str()); }

// The ranks inherit 0, 1 and 2: make sure they are open, so that no pipe of ours lands there.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }
}

// mpirun spells it -np; CLI11 short options are one letter. Rewritten only to parse: the program's
// own arguments are taken from the original argv.
std::vector<std::string> spell_np(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args) {
    if (a == "-np" || a.rfind("-np=", 0) == 0) a.insert(0, "-");
  }
  return args;
}

// --backend mpi: the mpirun that starts the ranks. --mpirun, else DISTCOMM_MPIRUN, else the one
// found at configure time, else mpirun in PATH.
std::string choose_mpirun(const std::string& option, const environment& caller) {
  std::string named = option;
  std::string how = "--mpirun " + option;
  if (named.empty() && caller.get("DISTCOMM_MPIRUN") != nullptr) {
    named = caller.get("DISTCOMM_MPIRUN");
    how = "DISTCOMM_MPIRUN=" + named;
  }
  if (!named.empty()) {
    const std::string path = find_program(named);
    if (path.empty()) throw launch_failure(exit_not_found, how + ": no such executable");
    return path;
  }
  const std::string configured = DISTCOMM_MPIRUN_DEFAULT;
  for (const std::string& candidate : {configured, std::string("mpirun")}) {
    const std::string path = find_program(candidate);
    if (!path.empty()) return path;
  }
  throw launch_failure(
      exit_not_found,
      "--backend mpi: MPI ranks are started by Open MPI's mpirun, and none was found (" +
          (configured.empty() ? std::string() : "not at " + configured + ", ") +
          "not in PATH); install it (openmpi-bin) or name it with --mpirun PATH or "
          "DISTCOMM_MPIRUN");
}

// The command line we build is Open MPI's: refuse another MPI's mpirun with a clear message rather
// than let it fail on the first option it does not know.
void require_open_mpi(const std::string& mpirun) {
  std::string says;
  try {
    says = command_output({mpirun, "--version"}, std::chrono::seconds(10));
  } catch (const std::exception& e) {
    throw launch_failure(exit_internal_error,
                         "cannot ask " + mpirun + " for its version: " + e.what());
  }
  // "mpirun (Open MPI) 4.1.4", "mpirun.openmpi (OpenRTE) 4.1.4" (4.x names itself so under any
  // other name), both followed by the project's address.
  for (const char* mark : {"Open MPI", "OpenRTE", "open-mpi.org"}) {
    if (says.find(mark) != std::string::npos) return;
  }
  const std::string first_line = says.substr(0, says.find('\n'));
  throw launch_failure(exit_usage, mpirun + " is not Open MPI's mpirun (its --version says '" +
                                       first_line +
                                       "'); --backend mpi drives Open MPI: name its mpirun with "
                                       "--mpirun or DISTCOMM_MPIRUN, or start the job with your "
                                       "MPI's own mpiexec");
}

// "gloo (processes, store, split, shrink, grow): <summary>" for every built backend, as its
// declaration says (backend_traits.hpp): --help's list.
std::string backend_lines() {
  std::string s;
  for (const distcomm::backend_info& b : distcomm::built_backends()) {
    std::string caps;
    if (b.traits.memory() != distcomm::memory_kind::host) caps = to_string(b.traits.memory());
    for (const distcomm::capability_name& c : distcomm::capability_names) {
      if (b.traits.can(c.value)) caps += (caps.empty() ? "" : ", ") + std::string(c.name);
    }
    s += "\n  " + std::string(b.name) + " (" + caps + "): " + b.summary;
  }
  return s;
}

// The ranks' backend must exist before N processes start to find out: a backend built into this
// DistComm, or a plugin on the ranks' search path (DISTCOMM_PLUGIN_PATH, the installation's).
void check_backend(const std::string& name, const distcomm::plugin::env_lookup& getenv) {
  if (distcomm::is_built_backend(name)) return;
  const std::string plugin = distcomm::plugin::plugin_named(name);
  std::string plugins;
  for (const distcomm::plugin::available& p : distcomm::plugin::list(getenv)) {
    if (p.name == plugin) return;
    plugins += (plugins.empty() ? "" : ", ") + p.name;
  }
  std::string folders;
  for (const std::string& d : distcomm::plugin::search_path(getenv)) {
    folders += (folders.empty() ? "" : ", ") + d;
  }
  throw launch_failure(
      exit_usage, "DISTCOMM_BACKEND='" + name + "' is neither a backend built into DistComm (" +
                      distcomm::join_names(distcomm::built_backends()) +
                      ") nor a plugin found in " +
                      (folders.empty() ? std::string("(no folder)") : folders) +
                      " (plugins there: " + (plugins.empty() ? std::string("none") : plugins) +
                      "); set DISTCOMM_PLUGIN_PATH to the folder holding " +
                      distcomm::plugin::file_name(plugin));
}

// The job's store lives here, not in a rank, so that any rank may be lost (--elastic) and a
// replacement for any rank may join (docs/FAULTS.md). It serves this job alone, with the ranks'
// token; the ranks find it through DISTCOMM_STORE_ADDR.
std::unique_ptr<distcomm::tcp_store_server> host_store(environment& job, int np) {
  const auto lookup = [&job](const char* name) { return job.get(name); };
  std::string token;
  try {
    token = distcomm::auth_token_from_env(lookup);
  } catch (const distcomm::rendezvous_error& e) {
    throw launch_failure(exit_usage, e.what());  // every rank would fail alike
  }
  distcomm::world_info world;
  world.size = np;
  auto store = std::make_unique<distcomm::tcp_store_server>(
      "127.0.0.1", 0, token, distcomm::job_identity_from_env(world, lookup));
  job.set("DISTCOMM_STORE_ADDR", "127.0.0.1:" + std::to_string(store->port()));
  return store;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();
  options o;
  CLI::App app{
      "distcomm-run: start N local processes of a program as the ranks of one DistComm "
      "job.\nOne machine only; multi-node runs use mpirun, srun or the job system."};
  app.name("distcomm-run");
  app.footer(
      "usage: distcomm-run -np N [options] [--] program [args...]\n"
      "Rank i gets DISTCOMM_RANK=i, RANK=i, a shared master port and auth token; see "
      "tools/README.md.\nBackends built into this DistComm (what each can do):" +
      backend_lines());
  app.add_option("-n,--np", o.np, "Number of ranks (also -np)")->check(CLI::Range(1, 4096));
  app.add_option(
      "--backend", o.backend,
      "DISTCOMM_BACKEND for the ranks: " + distcomm::join_names(distcomm::built_backends()) +
          ", or a plugin's name (plugins/README.md)");
  app.add_option("--timeout", o.timeout, "Stop the job after S seconds, exit 124 (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", o.grace, "Seconds between SIGTERM and SIGKILL when stopping")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-port", o.master_port, "Master port instead of a free one")
      ->check(CLI::Range(1, 65535));
  app.add_flag("--tag-output", o.tag_output, "Prefix every output line with [rank]");
  app.add_flag("--print-world", o.print_world,
               "Print the world each rank will detect; without a program, start nothing");
  app.add_flag("--print-config", o.print_config,
               "Print the DistComm configuration the ranks will read, and exit");
  app.add_flag("--no-auth", o.no_auth, "Give the ranks no DISTCOMM_AUTH_TOKEN");
  app.add_flag("--elastic", o.elastic,
               "A rank that fails does not stop the others (they may shrink and go on); the job "
               "ends when every rank has, with the first failure's exit code");
  app.add_option("--mpirun", o.mpirun,
                 "With --backend mpi: Open MPI's mpirun to start the ranks (default: "
                 "DISTCOMM_MPIRUN, else the one found at build time, else PATH)");
  app.prefix_command();  // everything from the program on belongs to the program

  std::vector<std::string> command;
  try {
    const std::vector<std::string> spelled = spell_np(argc, argv);
    std::vector<std::string> reversed(spelled.rbegin(), spelled.rend());  // as CLI11 wants it
    app.parse(reversed);
    // With prefix_command the leftovers are the tail of the command line: take that tail from the
    // original argv, so the program's own "-np" is not the rewritten one.
    command = app.remaining();
    const auto tail = static_cast<std::ptrdiff_t>(command.size());
    if (command.size() <= spelled.size() &&
        std::equal(command.begin(), command.end(), spelled.end() - tail)) {
      command.assign(argv + argc - tail, argv + argc);
    }
    if (!command.empty() && command.front() == "--") {
      command.erase(command.begin());
    } else if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-') {
      throw CLI::ExtrasError(app.get_name(), std::vector<std::string>{command.front()});
    }
    if (!o.print_config) {
      if (command.empty() && !o.print_world) {
        throw CLI::RequiredError("A program to run (distcomm-run -np N program args...)");
      }
      if (o.np == 0) throw CLI::RequiredError("-np");
    }
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the message (or the help)
    return code == 0 ? 0 : exit_usage;
  }
  if (o.np == 0) o.np = 1;

  try {
    const environment caller(environ);
    job_settings settings;
    settings.np = o.np;
    settings.backend = o.backend;
    settings.no_auth = o.no_auth;
    const int port = o.master_port != 0 ? o.master_port : find_free_port();
    const std::string token =
        needs_token(caller, o.no_auth) ? distcomm::random_token() : std::string();
    if (caller.get("DISTCOMM_JOB_ID") == nullptr) settings.job_id = new_job_id();
    environment job = job_environment(caller, settings, port, token);
    std::unique_ptr<distcomm::tcp_store_server> store;
    if (!command.empty() && !o.print_config && hosts_store(caller)) store = host_store(job, o.np);
    std::vector<environment> ranks;
    ranks.reserve(static_cast<std::size_t>(o.np));
    for (int r = 0; r < o.np; ++r) ranks.push_back(rank_environment(job, r));
    const auto lookup_in = [](const environment& env) {
      return [&env](const char* name) { return env.get(name); };
    };

    // Every rank reads the same DISTCOMM_* settings: refuse a bad one (--backend typo) now, once,
    // rather than in N processes.
    const distcomm::config config = distcomm::config::from_env(lookup_in(ranks.front()));
    if (o.print_config) {
      std::fputs(config.to_string().c_str(), stdout);
      std::fflush(stdout);
      // A misspelt setting is ignored by every rank: say so here, where the settings are checked.
      if (config.log >= distcomm::log_level::warn) {
        for (const std::string& w : distcomm::unknown_settings(caller.entries())) {
          distcomm::log(distcomm::log_level::warn, w);
        }
      }
      return 0;
    }
    if (!config.backend.empty()) check_backend(config.backend, lookup_in(ranks.front()));
    // MPI processes must be started by MPI's own launcher (singletons cannot join each other):
    // mpirun starts the ranks, and is the one process watched here.
    const bool via_mpirun =
        !config.backend.empty() &&
        distcomm::traits_of(config.backend).can(distcomm::capability::mpi_world);
    if (!o.mpirun.empty() && !via_mpirun) {
      throw launch_failure(
          exit_usage, "--mpirun is for --backend mpi" +
                          (config.backend.empty() ? std::string()
                                                  : "; the ranks' backend is " + config.backend));
    }
    environment mpirun_env;
    if (via_mpirun) {
      mpirun_env = mpirun_environment(job, cross_process_reads_work());
      for (int r = 0; r < o.np; ++r) {  // what --print-world shows
        ranks[static_cast<std::size_t>(r)] = open_mpi_rank_environment(mpirun_env, r, o.np);
      }
    }
    if (o.print_world) {
      for (int r = 0; r < o.np; ++r) {
        try {
          const distcomm::world_info w =
              distcomm::detect_world(lookup_in(ranks[static_cast<std::size_t>(r)]));
          std::printf("%s\n", w.to_string().c_str());
        } catch (const distcomm::error& e) {
          complain("rank " + std::to_string(r) + ": " + e.what());
          return exit_internal_error;
        }
      }
      std::fflush(stdout);
      if (command.empty()) return 0;
    }

    job_options jo;
    jo.command = command;
    jo.timeout = std::chrono::duration<double>(o.timeout);
    jo.grace = std::chrono::duration<double>(o.grace);
    jo.tag_output = o.tag_output;
    jo.elastic = o.elastic;
    if (via_mpirun) {
      mpirun_settings ms;
      ms.mpirun = choose_mpirun(o.mpirun, caller);
      require_open_mpi(ms.mpirun);
      ms.np = o.np;
      ms.as_root = ::geteuid() == 0;
      ms.tag_output = o.tag_output;  // mpirun's own tags: it alone sees which rank wrote a line
      jo.command = mpirun_command(ms, mpirun_env, command);
      jo.tag_output = false;
      jo.launcher = "mpirun";
      ranks = {mpirun_env};
    }
    std::fflush(nullptr);  // nothing buffered may be written twice (once by a forked child)
    return run_job(jo, ranks);
  } catch (const launch_failure& e) {
    complain(e.what());
    return e.code;
  } catch (const distcomm::invalid_argument_error& e) {
    complain(e.what());
    return exit_usage;
  } catch (const std::exception& e) {
    complain(e.what());
    return exit_internal_error;
  }
}
