#include "distcomm/trace/flight_recorder.hpp"
#include "distcomm/trace/recorder_names.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/files.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/log.hpp"

namespace distcomm::trace {

namespace {

// The live recorders of this process, for the dumps.
struct registry {
  std::mutex mu;
  std::vector<std::weak_ptr<flight_recorder>> recorders;
};
registry& recorders() {
  static registry* r = new registry;  // never destroyed: dumps may run while statics go
  return *r;
}

// SIGUSR1: the handler writes a byte to a pipe (all it may do in a signal handler); a thread
// reading it writes the dump.
int signal_pipe[2] = {-1, -1};

extern "C" void on_sigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

// A forked child (a DataLoader's worker) inherits the handler and the pipe, but not the thread
// that reads it: SIGUSR1 sent to the child made the parent dump, and the child lived on. The
// child gets SIGUSR1's default back (it ends, as a process without DistComm would) and closes
// its copy of the pipe. Only what a signal handler may call runs here.
extern "C" void forget_signal_dump_in_child() {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  for (int& fd : signal_pipe) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

// DISTCOMM_DUMP_DIR as config reads it: an existing directory this process can write, or empty.
std::string process_dump_dir() { return config::from_env(config::process_environment).dump_dir; }

// Once per process, where DISTCOMM_DUMP_DIR is set: SIGUSR1 dumps, unless the application
// handles SIGUSR1 itself (then it is left alone, and says so at debug level).
void install_signal_dump() {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      if (process_dump_dir().empty()) return;
    } catch (const std::exception&) {
      return;  // settings that do not read: the communicator made from them has said why
    }
    struct sigaction old {};
    if (::sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) {
      log(log_level::debug,
          "flight recorder: SIGUSR1 has a handler already; dumps on failure and on request "
          "only");
      return;
    }
    if (::pipe2(signal_pipe, O_CLOEXEC) != 0) return;
    // The handler never blocks: with the pipe full (signals faster than dumps) a byte is
    // dropped, and the dump under way covers it.
    ::fcntl(signal_pipe[1], F_SETFL, ::fcntl(signal_pipe[1], F_GETFL) | O_NONBLOCK);
    ::pthread_atfork(nullptr, nullptr, forget_signal_dump_in_child);
    std::thread([] {
      for (;;) {
        char byte = 0;
        const ssize_t n = ::read(signal_pipe[0], &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        dump_flight_records("SIGUSR1");
      }
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
  });
}

const char* state_name(flight_recorder::state s) {
  switch (s) {
    case flight_recorder::state::posted:
      return "posted";
    case flight_recorder::state::started:
      return "started";
    case flight_recorder::state::completed:
      return "completed";
    case flight_recorder::state::failed:
      return "failed";
  }
  return "unknown";
}

// The wall clock's lead on the steady clock, read once per dump: the entries keep steady time.
using wall_offset = std::chrono::system_clock::duration;
wall_offset wall_offset_now() {
  return std::chrono::system_clock::now().time_since_epoch() -
         std::chrono::duration_cast<wall_offset>(flight_recorder::now().time_since_epoch());
}

// Steady time `t` on the wall clock, as `Unit`s since the epoch (0 for none).
template <class Unit>
std::int64_t wall_since_epoch(flight_recorder::time_point t, wall_offset offset) {
  if (t == flight_recorder::time_point{}) return 0;
  const auto wall = std::chrono::duration_cast<wall_offset>(t.time_since_epoch()) + offset;
  return std::chrono::duration_cast<Unit>(wall).count();
}

std::int64_t micros(flight_recorder::time_point t, wall_offset offset) {
  return wall_since_epoch<std::chrono::microseconds>(t, offset);
}

nlohmann::ordered_json to_json(const flight_recorder::entry& e, wall_offset offset) {
  nlohmann::ordered_json j;
  j["seq"] = e.seq;
  j["collective"] = e.what;
  j["count"] = e.fp.count;
  if (e.fp.type >= 0) j["dtype"] = to_string(static_cast<dtype>(e.fp.type));
  if (e.fp.op >= 0) j["op"] = to_string(static_cast<reduce_op>(e.fp.op));
  if (e.fp.root >= 0) j["root"] = e.fp.root;
  if (e.fp.tensors > 0) j["tensors"] = e.fp.tensors;
  j["state"] = state_name(e.st);
  j["posted_us"] = micros(e.posted, offset);
  j["started_us"] = micros(e.started, offset);
  if (e.st == flight_recorder::state::completed || e.st == flight_recorder::state::failed) {
    j["ended_us"] = micros(e.ended, offset);
  }
  if (e.st == flight_recorder::state::failed) {
    j["error_kind"] = e.error_kind;
    j["error"] = e.error;
  }
  return j;
}

nlohmann::ordered_json to_json(const flight_recorder& r) {
  nlohmann::ordered_json j;
  const flight_recorder::identity& id = r.who();
  j["name"] = id.name;
  j["rank"] = id.rank;
  j["size"] = id.ranks.size();
  j["ranks"] = id.ranks;
  j["backend"] = id.backend;
  j["strategy"] = id.strategy;
  j["recorded"] = r.recorded();
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  const wall_offset offset = wall_offset_now();
  for (const flight_recorder::entry& e : r.entries()) entries.push_back(to_json(e, offset));
  j["entries"] = std::move(entries);
  return j;
}

}  // namespace

flight_recorder::flight_recorder(std::size_t capacity, identity id)
    : id_(std::move(id)), ring_(capacity) {}

std::shared_ptr<flight_recorder> flight_recorder::make(std::size_t capacity, identity id) {
  if (capacity == 0) return nullptr;
  auto r = std::make_shared<flight_recorder>(capacity, std::move(id));
  registry& reg = recorders();
  {
    const std::lock_guard<std::mutex> lock(reg.mu);
    reg.recorders.erase(std::remove_if(reg.recorders.begin(), reg.recorders.end(),
                                       [](const auto& w) { return w.expired(); }),
                        reg.recorders.end());
    reg.recorders.push_back(r);
  }
  install_signal_dump();
  return r;
}

flight_recorder::~flight_recorder() = default;

void flight_recorder::record(flight_recorder* r, std::uint64_t seq, const char* what,
                             const check::call_fingerprint& fp, time_point posted,
                             time_point started, const std::string& dump_dir, void (*call)(void*),
                             void* context) {
  if (r == nullptr) return call(context);
  const std::uint64_t slot = r->start(seq, what, fp, posted, started);
  try {
    call(context);
  } catch (const invalid_argument_error& e) {
    r->finish(slot, e, e.what());  // the caller's own bad call: nothing to dump
    throw;
  } catch (const std::exception& e) {
    r->finish(slot, e, e.what());
    dump_flight_records(std::string(what) + " failed: " + e.what(), dump_dir);
    throw;
  }
  r->finish(slot);
}

std::uint64_t flight_recorder::start(std::uint64_t seq, const char* what,
                                     const check::call_fingerprint& fp, time_point posted,
                                     time_point started) {
  const time_point t = started;
  const std::lock_guard<spin_lock> lock(mu_);
  const std::uint64_t slot = next_++;
  entry& e = ring_[slot % ring_.size()];
  e.seq = seq;
  e.what = what;
  e.fp = fp;
  e.st = state::started;
  e.posted = posted == time_point{} ? t : posted;
  e.started = t;
  e.ended = {};
  e.error.clear();
  e.error_kind = "";
  return slot;
}

void flight_recorder::finish(std::uint64_t slot) { end(slot, state::completed, "", {}); }

void flight_recorder::finish(std::uint64_t slot, const std::exception& error,
                             const std::string& text) {
  const char* kind = dynamic_cast<const timeout_error*>(&error)            ? "timeout"
                     : dynamic_cast<const peer_lost_error*>(&error)        ? "peer_lost"
                     : dynamic_cast<const mismatch_error*>(&error)         ? "mismatch"
                     : dynamic_cast<const excluded_error*>(&error)         ? "excluded"
                     : dynamic_cast<const backend_error*>(&error)          ? "backend"
                     : dynamic_cast<const invalid_argument_error*>(&error) ? "invalid_argument"
                                                                           : "error";
  end(slot, state::failed, kind, text);
}

void flight_recorder::end(std::uint64_t slot, state st, const char* kind, const std::string& text) {
  const time_point t = now();
  const std::lock_guard<spin_lock> lock(mu_);
  if (next_ - slot > ring_.size()) return;  // overwritten since
  entry& e = ring_[slot % ring_.size()];
  e.st = st;
  e.ended = t;
  e.error = text;
  e.error_kind = kind;
}

std::vector<flight_recorder::entry> flight_recorder::entries() const {
  const std::lock_guard<spin_lock> lock(mu_);
  std::vector<entry> out;
  const std::uint64_t n = std::min<std::uint64_t>(next_, ring_.size());
  for (std::uint64_t i = next_ - n; i < next_; ++i) out.push_back(ring_[i % ring_.size()]);
  return out;
}

std::uint64_t flight_recorder::recorded() const {
  const std::lock_guard<spin_lock> lock(mu_);
  return next_;
}

std::string flight_recorder::json() const { return to_json(*this).dump(1); }

namespace {
std::mutex next_name_mu;
std::string next_name;        // name_next_recorder()'s, taken by the next call below
std::vector<int> next_ranks;  // and its members' job ranks, where given
}  // namespace

flight_recorder::identity next_recorder_identity(int rank, int size) {
  static std::atomic<int> made{0};
  flight_recorder::identity id;
  id.rank = rank;
  {
    const std::lock_guard<std::mutex> lock(next_name_mu);
    id.name = std::exchange(next_name, std::string());
    id.ranks = std::exchange(next_ranks, std::vector<int>());
  }
  if (id.name.empty()) id.name = "c" + std::to_string(made++);
  if (id.ranks.size() != static_cast<std::size_t>(size)) {
    id.ranks.clear();
    for (int r = 0; r < size; ++r) id.ranks.push_back(r);
  }
  return id;
}

void name_next_recorder(std::string name, std::vector<int> job_ranks) {
  const std::lock_guard<std::mutex> lock(next_name_mu);
  next_name = std::move(name);
  next_ranks = std::move(job_ranks);
}

namespace {
struct writer_registry {
  std::mutex mu;
  std::vector<std::pair<std::string, dump_writer>> writers;
};
writer_registry& dump_writers() {
  static writer_registry* w = new writer_registry;  // never destroyed, as recorders()
  return *w;
}
}  // namespace

void add_dump_writer(const std::string& name, dump_writer write) {
  writer_registry& reg = dump_writers();
  const std::lock_guard<std::mutex> lock(reg.mu);
  for (const auto& [n, w] : reg.writers) {
    if (n == name) return;
  }
  reg.writers.emplace_back(name, write);
}

std::int64_t dump_contents::wall_ns(flight_recorder::time_point t) const {
  return wall_since_epoch<std::chrono::nanoseconds>(t, wall_offset);
}

std::string write_dump_file(const std::string& dir, const std::string& name,
                            const std::string& bytes) {
  const std::string path = dir + "/" + name;
  const std::string why = write_file_atomically(path, bytes);
  if (!why.empty()) {
    log(log_level::warn, "flight recorder: " + path + " (DISTCOMM_DUMP_DIR): " + why);
    return {};
  }
  return path;
}

std::string dump_flight_records(const std::string& reason, const std::string& dir) {
  // One dump at a time in a process (a failure and SIGUSR1 together): each then writes a whole
  // file, the later one replacing the earlier.
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  try {
    dump_contents d;
    d.reason = reason;
    d.dir = dir.empty() ? process_dump_dir() : dir;
    if (d.dir.empty()) return {};
    {
      registry& reg = recorders();
      const std::lock_guard<std::mutex> lock(reg.mu);
      for (const auto& w : reg.recorders) {
        if (auto r = w.lock()) d.recorders.push_back(std::move(r));
      }
    }
    if (d.recorders.empty()) return {};
    // What the process's timelines (DISTCOMM_TIMELINE) hold so far, on disk beside the dump.
    std::fflush(nullptr);
    // The job's rank: this process's rank in the first communicator it made.
    const flight_recorder::identity& first = d.recorders.front()->who();
    d.job_rank =
        first.ranks.empty() ? first.rank : first.ranks[static_cast<std::size_t>(first.rank)];
    d.wall_offset = wall_offset_now();
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    nlohmann::ordered_json j;
    j["format"] = "distcomm-flight-recorder/1";
    j["rank"] = d.job_rank;
    j["pid"] = static_cast<long>(::getpid());
    j["host"] = host;
    j["reason"] = reason;
    j["dumped_us"] = micros(flight_recorder::now(), d.wall_offset);
    nlohmann::ordered_json comms = nlohmann::ordered_json::array();
    for (const auto& r : d.recorders) comms.push_back(to_json(*r));
    j["communicators"] = std::move(comms);

    const std::string path = write_dump_file(d.dir,
                                             "distcomm-flight." + std::to_string(d.job_rank) + "." +
                                                 std::to_string(::getpid()) + ".json",
                                             j.dump(1) + "\n");
    if (path.empty()) return {};
    log(log_level::info, "flight recorder: wrote " + path + " (" + reason + ")");
    std::vector<std::pair<std::string, dump_writer>> writers;
    {
      writer_registry& reg = dump_writers();
      const std::lock_guard<std::mutex> lock(reg.mu);
      writers = reg.writers;
    }
    for (const auto& [name, write] : writers) {
      try {
        write(d);
      } catch (const std::exception& e) {
        log(log_level::warn, "flight recorder: the " + name + " format's dump failed: " + e.what());
      }
    }
    return path;
  } catch (const std::exception& e) {
    log(log_level::warn, std::string("flight recorder: dump failed: ") + e.what());
    return {};
  }
}

}  // namespace distcomm::trace
