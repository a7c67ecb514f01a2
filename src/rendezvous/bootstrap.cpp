#include "distcomm/rendezvous/bootstrap.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/file_store.hpp"
#include "distcomm/rendezvous/join.hpp"
#include "distcomm/rendezvous/store_url.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/trace/recorder_names.hpp"
#include "store_detail.hpp"
#include "store_socket.hpp"

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

// One deadline for the whole start-up of a rank (meeting, connect, handshake, every wait), and
// how its messages name the rank.
struct startup {
  int rank = 0;
  int size = 1;
  std::chrono::duration<double> timeout{};  // DISTCOMM_TIMEOUT, for messages
  // DISTCOMM_STALL_WARNING: a wait longer than this logs who is missing, and again after each
  // further period; 0: never.
  std::chrono::duration<double> interval{};
  detail::store_clock::time_point start;
  detail::store_clock::time_point deadline;

  std::string who() const {
    return "rendezvous: rank " + std::to_string(rank) + " of " + std::to_string(size);
  }
  std::chrono::duration<double> left() const {
    return std::max(std::chrono::duration<double>(deadline - detail::store_clock::now()),
                    std::chrono::duration<double>(0.0));
  }
  // "15 s left (DISTCOMM_TIMEOUT=20 s)"
  std::string left_text() const {
    return detail::whole_seconds(left()) +
           " left of start-up (DISTCOMM_TIMEOUT=" + detail::format_seconds(timeout) + ")";
  }
  // The next wait of a phase: until the next progress line (every `interval` since the start,
  // whichever phase it falls in) or the deadline. A tick less than 0.1 s away is skipped, so a
  // wait that its store ended a little early does not log twice.
  std::chrono::duration<double> slice() const {
    if (interval.count() <= 0) return left();
    const auto now = detail::store_clock::now();
    const auto every = std::chrono::duration_cast<detail::store_clock::duration>(interval);
    const auto ticks = (now - start + std::chrono::milliseconds(100)) / every;
    const auto next = start + (ticks + 1) * every;
    return std::min(left(), std::chrono::duration<double>(next - now));
  }
};

// "2", "2, 5", "2, 5 and 3 more"
std::string rank_list(const std::vector<int>& ranks) {
  constexpr std::size_t max_listed = 20;
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < max_listed; ++i) {
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  if (ranks.size() > max_listed)
    out += " and " + std::to_string(ranks.size() - max_listed) + " more";
  return out;
}

// `dir`, made mode 0700 when missing; refused unless it is a directory (not a link to one) of
// this user's that nobody else may enter. Everything the meeting trusts lies under it: another
// local user who could plant a file there could point the job at a store of their own, and one
// who could read there would learn the store's token.
void private_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw rendezvous_error("rendezvous: cannot create the meeting directory " + dir + ": " +
                           detail::errno_text(errno) + " (set TMPDIR to a directory of yours)");
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    throw rendezvous_error("rendezvous: cannot inspect the meeting directory " + dir + ": " +
                           detail::errno_text(errno));
  }
  const std::string fix = "; remove it, or set TMPDIR to a directory of yours";
  if (!S_ISDIR(st.st_mode)) {
    throw rendezvous_error("rendezvous: the meeting directory " + dir +
                           (S_ISLNK(st.st_mode) ? " is a symbolic link" : " is not a directory") +
                           ", which another user may have planted" + fix);
  }
  if (st.st_uid != ::geteuid()) {
    throw rendezvous_error("rendezvous: the meeting directory " + dir + " belongs to uid " +
                           std::to_string(st.st_uid) + ", not to this user (uid " +
                           std::to_string(::geteuid()) + "): another user could feed this job" +
                           fix);
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw rendezvous_error("rendezvous: the meeting directory " + dir + " is mode " + mode +
                           ", open to other users, who could feed this job or read its store's "
                           "token; chmod 700 it, remove it, or set TMPDIR to a directory of yours");
  }
}

// The ranks of one node meet through a folder only this user can enter: rank 0 serves the store on
// 127.0.0.1 and leaves its port there, and, where the environment gave no token (mpirun, srun),
// a token of 32 random bytes it made, so that another local user cannot talk to the store.
// `token` becomes the one the store uses.
std::shared_ptr<store> meet_on_this_node(const world_info& w, const startup& s, std::string& token,
                                         const job_identity& me, const env_lookup& getenv,
                                         std::string* place) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string mine = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                           "/distcomm-" + std::to_string(::geteuid());
  private_directory(mine);
  *place = mine + "/" + to_string(w.launcher) + "-" + job_name(w.launcher, getenv);
  file_store meeting(*place, s.slice());
  const bool made_token = token.empty();
  if (w.rank == 0) {
    if (made_token) {
      token = random_token();
      meeting.set("token", bytes(token.begin(), token.end()));  // before the port: read after it
    }
    auto server = std::make_unique<tcp_store_server>("127.0.0.1", 0, token, me);
    const int port = server->port();
    auto client = std::make_shared<tcp_store>(std::move(server), "127.0.0.1", s.left(), token);
    const std::string text = std::to_string(port);
    meeting.set("port", bytes(text.begin(), text.end()));
    return client;
  }
  bytes b;
  for (;;) {
    meeting.set_timeout(s.slice());
    try {
      b = meeting.get("port");
      break;
    } catch (const timeout_error&) {
      if (s.left().count() <= 0) {
        throw timeout_error(s.who() + ": rank 0 did not publish its store's port in " + *place +
                            " within " + detail::format_seconds(s.timeout) +
                            " (DISTCOMM_TIMEOUT); is rank 0 running, started by the same "
                            "launcher as this rank?");
      }
      log(log_level::warn, s.who() + ": waiting for rank 0 to publish its store's port in " +
                               *place + "; " + s.left_text());
    }
  }
  const std::string text(b.begin(), b.end());
  int port = 0;
  try {
    port = std::stoi(text);
  } catch (const std::exception&) {
    throw rendezvous_error("rendezvous: the port published in " + *place + " is not a number ('" +
                           text + "')");
  }
  if (made_token) {
    meeting.set_timeout(std::chrono::seconds(1));  // written before the port
    const bytes t = meeting.get("token");
    token.assign(t.begin(), t.end());
  }
  return std::make_shared<tcp_store>("127.0.0.1", port, s.left(), token, me);
}

// store_barrier "distcomm/bootstrap" within the start-up deadline, saying every few seconds
// which ranks are still missing. A rank whose store closes meanwhile (rank 0, hosting it, gave
// up or failed first) says what it was waiting for.
void meet_every_rank(store& kv, const startup& s, const std::string& where, bool rank0_hosts) {
  const std::string name = "distcomm/bootstrap";
  const auto key_of = [&](int r) { return name + "/" + std::to_string(r); };
  std::vector<int> missing;
  const auto missing_text = [&] {
    return std::string(missing.size() == 1 ? "rank " : "ranks ") + rank_list(missing) + " (of " +
           std::to_string(s.size) + ")";
  };
  // Which ranks have not arrived: one request naming every rank's key, made only when the wait
  // ends without them (a job of 16,384 ranks makes three requests per rank otherwise).
  const auto find_missing = [&] {
    std::vector<std::string> keys;
    keys.reserve(static_cast<std::size_t>(s.size));
    for (int r = 0; r < s.size; ++r) keys.push_back(key_of(r));
    missing.clear();
    kv.set_timeout(std::chrono::duration<double>(0.001));
    try {
      kv.wait(keys);
    } catch (const detail::missing_keys_error& e) {
      for (const std::string& k : e.missing()) {
        if (k.rfind(name + "/", 0) == 0) missing.push_back(std::stoi(k.substr(name.size() + 1)));
      }
      std::sort(missing.begin(), missing.end());
    }
  };
  try {
    kv.set_timeout(s.slice());
    const std::string done = detail::arrive(kv, name, s.rank, s.size);
    for (;;) {
      kv.set_timeout(s.slice());
      try {
        kv.wait({done});
        return;
      } catch (const detail::missing_keys_error&) {
      }
      if (s.left().count() <= 0) {
        find_missing();
        if (missing.empty()) return;  // all arrived just as the wait expired
        throw timeout_error(s.who() + ": " + missing_text() + " never reached the store at " +
                            where + " within " + detail::format_seconds(s.timeout) +
                            " (DISTCOMM_TIMEOUT); " + (missing.size() == 1 ? "is it" : "are they") +
                            " running, with this job's MASTER_ADDR and MASTER_PORT?");
      }
      // Rank 0 names the ranks still missing; the others say how many arrived (one request).
      std::string waiting_for;
      if (s.rank == 0) {
        find_missing();
        if (missing.empty()) continue;
        waiting_for = missing_text() + " to reach the store at " + where + " (" +
                      std::to_string(s.size - static_cast<int>(missing.size())) + " arrived)";
      } else {
        kv.set_timeout(s.slice());
        waiting_for = "the other ranks to reach the store at " + where + " (" +
                      std::to_string(kv.add(name + "/arrived", 0)) + " of " +
                      std::to_string(s.size) + " arrived)";
      }
      log(log_level::warn, s.who() + ": waiting for " + waiting_for + "; " + s.left_text());
    }
  } catch (const peer_lost_error& e) {
    if (s.rank == 0 && rank0_hosts) throw;
    throw peer_lost_error(s.who() + ": the store at " + where + " closed during start-up" +
                          " while this rank waited for " +
                          (missing.empty() ? std::string("the other ranks") : missing_text()) +
                          (rank0_hosts ? ": rank 0, which hosts it, gave up or failed first ("
                                       : ": its server (DISTCOMM_STORE_ADDR) stopped (") +
                          e.what() + ")");
  }
}

// A process that found the job started without it (join::started(): a replacement for a lost
// rank): it takes a ticket and waits, within the start-up deadline, for the running ranks to admit
// it at a step boundary (distcomm::grow()). Returns its place in the grown job.
job join_running_job(const job& launched, const startup& s, const std::string& where) {
  store& kv = *launched.kv;
  const std::int64_t ticket = join::ask(kv, s.rank);
  log(log_level::info, s.who() + ": the job at " + where +
                           " runs without this rank: joining it as a replacement (ticket " +
                           std::to_string(ticket) + ")");
  try {
    for (;;) {
      kv.set_timeout(s.slice());
      try {
        kv.wait({join::answer_key(ticket)});
        break;
      } catch (const detail::missing_keys_error&) {
      }
      if (s.left().count() <= 0) {
        throw timeout_error(
            s.who() + ": the job at " + where + " runs without this rank, and its ranks did not " +
            "admit it within " + detail::format_seconds(s.timeout) +
            " (DISTCOMM_TIMEOUT): running ranks admit a replacement at a step boundary of a " +
            "program that calls distcomm::grow() (distcomm-train-mlp --elastic), and only for a " +
            "rank they lost; or the store served a job before this one (give every job a store " +
            "of its own)");
      }
      log(log_level::warn, s.who() + ": waiting for the running ranks to admit this " +
                               "replacement (ticket " + std::to_string(ticket) + "); " +
                               s.left_text());
    }
  } catch (const peer_lost_error& e) {
    throw peer_lost_error(s.who() + ": the store at " + where + " closed while this replacement " +
                          "waited to be admitted: the job ended, or the process hosting the " +
                          "store failed (" + e.what() + ")");
  }
  const join::admission a = join::answer(kv, ticket);
  log(log_level::info, s.who() + ": admitted to the running job as rank " + std::to_string(a.rank) +
                           " of " + std::to_string(a.size));
  join::mark_replacement();
  // Every member names the grown communicator's flight recorder alike.
  trace::name_next_recorder("g" + std::to_string(a.grow));
  return job{join::grown_world(launched.world, a.rank, a.size),
             join::group_store(launched.kv, a.grow)};
}

}  // namespace

job_identity job_identity_from_env(const world_info& w, const env_lookup& getenv) {
  const auto get = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? std::string(v) : std::string();
  };
  job_identity j;
  j.world_size = w.size;
  if (const char* id = config::read_variable("DISTCOMM_JOB_ID", getenv)) j.id = id;
  if (j.id.empty()) {
    // Only the launcher that started this rank: every rank of a job matched the same one, and
    // the same launcher gives them all the same id. Anything else stays unsaid (matches all).
    switch (w.launcher) {
      case launcher_kind::torchrun:
        if (!get("TORCHELASTIC_RUN_ID").empty()) j.id = "torchrun:" + get("TORCHELASTIC_RUN_ID");
        break;
      case launcher_kind::open_mpi:
      case launcher_kind::mpich:
        if (!get("PMIX_NAMESPACE").empty()) {
          j.id = "pmix:" + get("PMIX_NAMESPACE");
        } else if (w.launcher == launcher_kind::open_mpi &&
                   !get("OMPI_MCA_ess_base_jobid").empty()) {
          j.id = "open_mpi:" + get("OMPI_MCA_ess_base_jobid");
        }
        break;
      case launcher_kind::slurm: {
        std::string step = get("SLURM_STEP_ID");
        if (step.empty()) step = get("SLURM_STEPID");
        if (!get("SLURM_JOB_ID").empty()) j.id = "slurm:" + get("SLURM_JOB_ID") + "." + step;
        break;
      }
      default:
        break;
    }
  }
  if (j.id.size() > 255) j.id.resize(255);  // the handshake's limit; ids are far shorter
  return j;
}

job bootstrap(const config& cfg) { return bootstrap(cfg, config::process_environment); }

job shared_bootstrap(const config& cfg) {
  static std::mutex mu;
  // Held for the life of the process: the backends keep no reference to the store once they
  // are connected (gloo keeps a weak one), and a second init() must find the job, not start a
  // second one on the same port. Never destroyed, so that exit does not wait on its clients.
  static std::shared_ptr<store>* kv = new std::shared_ptr<store>();
  static world_info world;
  std::lock_guard<std::mutex> lk(mu);
  if (*kv) return job{world, *kv};
  job j = bootstrap(cfg);
  *kv = j.kv;
  world = j.world;
  return j;
}

job bootstrap(const config& cfg, const env_lookup& getenv) {
  set_log_level(cfg.log);
  startup s;
  s.timeout = cfg.timeout;
  s.interval = cfg.stall_warning;
  s.start = detail::store_clock::now();
  s.deadline = detail::deadline_after(cfg.timeout);
  job j;
  j.world = detect_world(getenv);
  log(log_level::info, "world: " + j.world.to_string());
  if (j.world.size == 1) return j;  // nothing to meet
  s.rank = j.world.rank;
  s.size = j.world.size;

  std::string token = auth_token_from_env(getenv);  // meet_on_this_node may make one
  const job_identity me = job_identity_from_env(j.world, getenv);
  std::string meeting_place;
  std::string where;
  const auto addr = store_addr_from_env(getenv);
  std::optional<store_request> url = store_url_from_env(getenv);
  if (addr && url) {
    throw rendezvous_error(
        "both DISTCOMM_STORE_ADDR and DISTCOMM_STORE are set: a job has one "
        "store; unset one of them");
  }
  if (!addr && !url) {
    // torchrun's agent listens on MASTER_PORT itself and holds the job's store there.
    if (const auto agent = torchrun_agent_store_url(j.world, getenv)) {
      url = parse_store_url(*agent);
      log(log_level::info, s.who() + ": torchrun's agent hosts the job's store at " + *agent +
                               " (TORCHELASTIC_USE_AGENT_STORE=True)");
    }
  }
  const bool external = addr.has_value() || url.has_value();
  try {
    if (url) {
      // The job's store by URL (an etcd cluster, a store plugin): every rank is a client.
      where = url->url;
      url->timeout = s.left();
      url->token = token;
      url->job = me;
      url->rank = j.world.rank;
      j.kv = open_store(*url);
    } else if (external) {
      // Someone else runs the store: every rank is a client.
      where = detail::host_port(addr->host, addr->port);
      j.kv = make_tcp_store(addr->host, addr->port, false, s.left(), token, me);
    } else if (j.world.master_port == 0 && j.world.single_node()) {
      j.kv = meet_on_this_node(j.world, s, token, me, getenv, &meeting_place);
      where = "127.0.0.1:" + std::to_string(static_cast<tcp_store&>(*j.kv).port());
      log(log_level::info, "rank " + std::to_string(j.world.rank) + ": no master port from " +
                               to_string(j.world.launcher) + "; ranks met through " +
                               meeting_place);
    } else {
      require_master(j.world);
      where = detail::host_port(j.world.master_addr, j.world.master_port);
      j.kv = make_tcp_store(j.world.master_addr, j.world.master_port, j.world.rank == 0, s.left(),
                            token, me);
    }
    // A process that finds the job started has come late: a replacement. Rank 0 cannot be one
    // where it hosts the store (a store it made anew knows no job).
    if ((external || j.world.rank != 0) && join::started(*j.kv)) {
      join::remember(j);
      job grown = join_running_job(j, s, where);
      j.kv->set_timeout(cfg.timeout);
      return grown;
    }
    meet_every_rank(*j.kv, s, where, !external);
    // From here on, a process that arrives for one of this job's ranks is a replacement. Every
    // rank says so: any of them may be lost the next moment.
    join::mark_started(*j.kv);
  } catch (const timeout_error& e) {
    if (j.kv) j.kv->mark_job_failed();
    const std::string what = e.what();
    if (what.rfind("rendezvous: ", 0) == 0) throw;
    throw timeout_error(s.who() + " did not finish start-up within " +
                        detail::format_seconds(cfg.timeout) + " (DISTCOMM_TIMEOUT): " + what);
  } catch (...) {
    if (j.kv) j.kv->mark_job_failed();
    throw;
  }
  j.kv->set_timeout(cfg.timeout);
  if (!meeting_place.empty() && j.world.rank == 0) {
    std::error_code ignored;  // every rank has read the port: the meeting place can go
    std::filesystem::remove_all(meeting_place, ignored);
  }
  join::remember(j);
  log(log_level::info, "rank " + std::to_string(j.world.rank) + ": every rank reached the store" +
                           (token.empty() ? " (no authentication token)" : " (authenticated)"));
  return j;
}

}  // namespace distcomm
