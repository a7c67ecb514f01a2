#include "distcomm/rendezvous/bootstrap.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/file_store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace distcomm {
namespace {

// The start time of process `pid` (field 22 of /proc/pid/stat), so that a reused pid never names
// an old meeting place; empty when unavailable.
std::string start_time_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');  // the command name may contain spaces
  if (close == std::string::npos) return {};
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
  }
  return f;
}

// Plain mpirun, mpiexec and srun give rank and size but no port. When every rank is on this node
// they meet in a file store named after their job: rank 0 starts the TCP store on a free port and
// publishes the port. The job is named by the launcher when it can be (PMIx's PMIX_NAMESPACE,
// which Open MPI and Slurm with PMIx export; for ranks srun started, Slurm's job and step ids:
// every srun is a step of its own), else by the launcher process (mpirun, the Hydra proxy,
// slurmstepd) as the ranks' parent. Not the Slurm ids for other launchers: two mpiexec runs side
// by side in one batch script share them. The launcher's name comes
// first: a rank started through a wrapper that forks (`mpirun -np 2 perf stat ./app`, valgrind, a
// shell script without exec) has the wrapper as its parent, and the ranks would wait in
// different places until DISTCOMM_TIMEOUT.
std::string job_name(launcher_kind launcher, const env_lookup& getenv) {
  const auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  std::string job = get("PMIX_NAMESPACE");
  if (job.empty() && launcher == launcher_kind::slurm && !get("SLURM_JOB_ID").empty()) {
    job = "slurm." + get("SLURM_JOB_ID") + "." + get("SLURM_STEP_ID");
  }
  if (job.empty()) {
    const pid_t parent = getppid();
    return std::to_string(parent) + "-" + start_time_of(parent);
  }
  // A file name: keep it to characters that cannot leave the directory.
  for (char& c : job) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return "job-" + job;
}

std::shared_ptr<store> meet_on_this_node(const world_info& w, const config& cfg,
                                         const std::string& token, const env_lookup& getenv,
                                         std::string* place) {
  const char* tmp = std::getenv("TMPDIR");
  *place = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/distcomm-" +
           std::to_string(getuid()) + "/" + to_string(w.launcher) + "-" + job_name(w.launcher, getenv);
  file_store meeting(*place, cfg.timeout);
  if (w.rank == 0) {
    auto server = std::make_unique<tcp_store_server>("127.0.0.1", 0, token);
    const int port = server->port();
    auto client = std::make_shared<tcp_store>(std::move(server), "127.0.0.1", cfg.timeout, token);
    const std::string text = std::to_string(port);
    meeting.set("port", bytes(text.begin(), text.end()));
    return client;
  }
  const bytes b = meeting.get("port");
  const std::string text(b.begin(), b.end());
  int port = 0;
  try {
    port = std::stoi(text);
  } catch (const std::exception&) {
    throw rendezvous_error("rendezvous: the port published in " + *place + " is not a number ('" +
                           text + "')");
  }
  return std::make_shared<tcp_store>("127.0.0.1", port, cfg.timeout, token);
}

}  // namespace

job bootstrap(const config& cfg) {
  return bootstrap(cfg, [](const char* name) -> const char* { return std::getenv(name); });
}

job bootstrap(const config& cfg, const env_lookup& getenv) {
  set_log_level(cfg.log);
  job j;
  j.world = detect_world(getenv);
  log(log_level::info, "world: " + j.world.to_string());
  if (j.world.size == 1) return j;  // nothing to meet

  const std::string token = auth_token_from_env(getenv);
  std::string meeting_place;
  if (const auto addr = store_addr_from_env(getenv)) {
    // Someone else runs the store: every rank is a client.
    j.kv = make_tcp_store(addr->host, addr->port, false, cfg.timeout, token);
  } else if (j.world.master_port == 0 && j.world.single_node()) {
    j.kv = meet_on_this_node(j.world, cfg, token, getenv, &meeting_place);
    log(log_level::info, "rank " + std::to_string(j.world.rank) + ": no master port from " +
                             to_string(j.world.launcher) + "; ranks met through " + meeting_place);
  } else {
    require_master(j.world);
    j.kv = make_tcp_store(j.world.master_addr, j.world.master_port, j.world.rank == 0, cfg.timeout,
                          token);
  }
  j.kv->set_timeout(cfg.timeout);
  store_barrier(*j.kv, "distcomm/bootstrap", j.world.rank, j.world.size);
  if (!meeting_place.empty() && j.world.rank == 0) {
    std::error_code ignored;  // every rank has read the port: the meeting place can go
    std::filesystem::remove_all(meeting_place, ignored);
  }
  log(log_level::info, "rank " + std::to_string(j.world.rank) + ": every rank reached the store" +
                           (token.empty() ? " (no authentication token)" : " (authenticated)"));
  return j;
}

}  // namespace distcomm
