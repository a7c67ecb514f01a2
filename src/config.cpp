#include "distcomm/config.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "distcomm/core/error.hpp"
#include "distcomm/registry/strategies.hpp"

extern char** environ;

namespace distcomm {
namespace {

// Every variable DistComm reads. Keep in step with the README settings table (a test checks it).
const std::vector<setting_info> setting_rows = {
    {"DISTCOMM_TIMEOUT", "300",
     "Seconds any collective may wait for a peer before failing with timeout_error."},
    {"DISTCOMM_FUSION_THRESHOLD", "64M",
     "Tensor Fusion buffer size in bytes (K/M/G suffixes); 0 disables fusion."},
    {"DISTCOMM_FUSION_CUTOFF", "1M (gloo: 4M, shm: 64K)",
     "Tensors of at least this many bytes are reduced in place instead of being copied into the "
     "fusion buffer; 0 packs every tensor below the threshold. The default is the backend's."},
    {"DISTCOMM_SEGMENT_SIZE", "256K (gloo: 1M)",
     "Pipelining segment of the ring, tree and parameter-server strategies, in bytes. The default "
     "is the backend's."},
    {"DISTCOMM_PS_SERVERS", "1",
     "Server ranks of the parameter_server strategy (1 = classic parameter server, 0 = all "
     "ranks, fully sharded)."},
    {"DISTCOMM_ALGO", "(built-in table)",
     "Per-size choice of strategy::automatic, e.g. `tree:0-64K;ring:64K-max`."},
    {"DISTCOMM_DETERMINISTIC", "0",
     "1 = reduce every element in rank order: bitwise identical results for every strategy and "
     "fusion threshold."},
    {"DISTCOMM_MISMATCH_CHECK", "1",
     "1 = before each collective the ranks compare what they were called with (collective, "
     "dtype, count, op, root, order) and raise mismatch_error on every rank when it differs; 0 "
     "turns the check off. Must be the same on every rank."},
    {"DISTCOMM_BACKEND", "(fastest built for the job)",
     "Backend of distcomm::init() and of the tools when none is named: local, mpi, gloo, ucx, "
     "nccl, or a plugin's name (plugin:<name> loads the plugin even where that backend is "
     "linked in)."},
    {"DISTCOMM_STRATEGY", "auto",
     "Allreduce strategy of distcomm::init() and of the tools when none is named: auto, ring, "
     "tree, rd, ps or native."},
    {"DISTCOMM_LOG", "warn", "Log level on stderr: error, warn, info or debug."},
    {"DISTCOMM_CYCLE_TIME", "1",
     "Milliseconds the engine gathers submitted tensors before the ranks agree on what is ready, "
     "while tensors are pending (an idle engine sleeps until the next submission)."},
    {"DISTCOMM_STALL_WARNING", "60",
     "Seconds a rank waits in a collective, in the engine or at start-up before it logs which "
     "ranks (and, in the engine, which tensors) it waits for, and again after each further "
     "period; 0 turns the warning off."},
    {"DISTCOMM_TIMELINE", "(none)",
     "File for a Chrome trace (Perfetto, chrome://tracing) of every collective and engine phase; "
     "%r becomes the rank."},
    {"DISTCOMM_FLIGHT_RECORDER", "1024",
     "Collectives each communicator remembers (sequence number, collective, dtype, count, op, "
     "root, state, timestamps) for the hang forensics of distcomm-trace; 0 turns the recorder "
     "off."},
    {"DISTCOMM_DUMP_DIR", "(none)",
     "Existing directory where each rank writes its flight recorder as JSON when a collective "
     "fails or times out, on SIGUSR1 and on request (trace::dump_flight_records()); "
     "`distcomm-trace DIR` reads them."},
    {"DISTCOMM_AUTOTUNE", "0",
     "1 = during the first steps the engine tries fusion thresholds and cut-offs, cycle times, "
     "segment sizes, strategy cut-offs and, across hosts, the hierarchical threshold, starting "
     "from the settings given; keeps the fastest when it beats them (the same on every rank) and "
     "logs it at info level (docs/SCALING.md, Autotuning)."},
    {"DISTCOMM_AUTOTUNE_FILE", "(none)",
     "JSON file of the autotuner's choice: written when a search ends; when it exists and was made "
     "for this backend and world size, the engine uses it from the start instead of searching."},
    {"DISTCOMM_AUTOTUNE_STEPS", "5", "Steps the autotuner runs each candidate for (1 to 1000)."},
    {"DISTCOMM_IFACE", "(127.0.0.1 on one node, else the host name)",
     "Network interface, address or subnet (CIDR: each host's address in it) the TCP "
     "transports use: gloo binds it, ucx takes its interface unless UCX_NET_DEVICES is set."},
    {"DISTCOMM_HIERARCHICAL", "auto",
     "init() on a job across hosts with several ranks on each: auto (allreduce hierarchical from "
     "256K: shm inside each host, the network backend across), off, or the size to start from."},
    {"DISTCOMM_PLUGIN_PATH", "(unset)",
     "Colon-separated folders searched for backend plugins (libdistcomm_backend_<name>.so) "
     "before the installation's plugin folder."},
    {"DISTCOMM_PLUGIN_OPTIONS", "(unset)",
     "Free-form text handed to a backend plugin when it starts (its documentation says what it "
     "takes)."},
};

std::string quote(const char* name, const std::string& value) {
  return std::string(name) + "='" + value + "'";
}

double parse_seconds(const char* name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d) ||
      d <= 0) {
    throw invalid_argument_error(quote(name, v) +
                                 " is not a positive number of seconds (e.g. 30 or 2.5)");
  }
  return d;
}

int parse_count(const char* name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE || n < 0 || n > 1000000) {
    throw invalid_argument_error(quote(name, v) + " is not a non-negative integer");
  }
  return static_cast<int>(n);
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool parse_bool(const char* name, const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw invalid_argument_error(quote(name, value) +
                               " is not a boolean (use 1/0, true/false, yes/no, on/off)");
}

// Read by detect_world(), bootstrap() and the shm backend (docs/RENDEZVOUS.md,
// backends/shm/README.md), not into a config.
const std::vector<setting_info> rendezvous_rows = {
    {"DISTCOMM_RANK", "(from the launcher)", "This process's rank; overrides the launcher's."},
    {"DISTCOMM_WORLD_SIZE", "(from the launcher)", "Number of ranks; overrides the launcher's."},
    {"DISTCOMM_LOCAL_RANK", "(from the launcher)", "Rank among the ranks on this node."},
    {"DISTCOMM_LOCAL_WORLD_SIZE", "(from the launcher)", "Number of ranks on this node."},
    {"DISTCOMM_NODE_RANK", "(from the launcher)", "Index of this node."},
    {"DISTCOMM_MASTER_ADDR", "(from the launcher; 127.0.0.1 on one node)",
     "Host of rank 0, where the job's store listens."},
    {"DISTCOMM_MASTER_PORT", "(from the launcher)", "Port of the job's store on rank 0."},
    {"DISTCOMM_STORE_ADDR", "(unset)",
     "host:port of a store run by someone else; then no rank hosts one."},
    {"DISTCOMM_AUTH_TOKEN", "(unset: no authentication)",
     "Shared secret for the store's HMAC-SHA256 challenge-response; never sent."},
    {"DISTCOMM_AUTH_TOKEN_FILE", "(unset)", "File holding the token (instead of the variable)."},
    {"DISTCOMM_JOB_ID", "(from the launcher)",
     "Names this rank's job in the store handshake; a store refuses a rank of another job."},
    {"DISTCOMM_SHM_RING", "1M",
     "Bytes of each ordered pair's message ring in the shm backend (at least 4K)."},
    {"DISTCOMM_SHM_CHUNK", "1M",
     "Bytes per rank the shm backend's collectives stage at a time, twice (at least 4K)."},
};

// Read only by the tools and the project's scripts, documented where they are read; known so
// that setting them is not taken for a typo.
const char* const tool_variables[] = {
    "DISTCOMM_MPIRUN",         // distcomm-run --backend mpi (tools/README.md)
    "DISTCOMM_JOBS",           // scripts/common.sh: build and test parallelism
    "DISTCOMM_SKIP_PACKAGES",  // scripts/common.sh: do not install packages
    "DISTCOMM_KEEP_TMP",       // tests/consumer/run.sh, tests/packaging/run.sh
    "DISTCOMM_FUZZ_CXX",       // fuzz/run.sh
};

// Edits (insertions, deletions, substitutions) that turn a into b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<setting_info>& settings() { return setting_rows; }
const std::vector<setting_info>& rendezvous_settings() { return rendezvous_rows; }

std::vector<std::string> unknown_settings(const std::vector<std::string>& environment) {
  static const std::string prefix = "DISTCOMM_";
  std::vector<std::string> known;
  for (const auto* table : {&settings(), &rendezvous_settings()}) {
    for (const setting_info& s : *table) known.emplace_back(s.name);
  }
  known.insert(known.end(), std::begin(tool_variables), std::end(tool_variables));

  std::vector<std::string> warnings;
  for (const std::string& entry : environment) {
    const std::string name = entry.substr(0, entry.find('='));
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    // Near enough to be a typo: at most a third of the part after the prefix differs
    // (DISTCOMM_TIMOUT -> DISTCOMM_TIMEOUT, not DISTCOMM_FOO -> DISTCOMM_LOG).
    const std::string* closest = nullptr;
    std::size_t best = (std::max<std::size_t>(name.size() - prefix.size(), 3)) / 3;
    for (const std::string& k : known) {
      const std::size_t d = edit_distance(name, k);
      if (d <= best && (closest == nullptr || d < best)) {
        closest = &k;
        best = d;
      }
    }
    std::string message = name + " is not a DistComm setting and is ignored";
    message += closest != nullptr ? "; did you mean " + *closest + "?"
                                  : " (README.md, Settings, lists every setting)";
    warnings.push_back(std::move(message));
  }
  return warnings;
}

void warn_unknown_settings() {
  static std::mutex mutex;
  static std::set<std::string> warned;
  std::vector<std::string> environment;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) environment.emplace_back(*e);
  const std::lock_guard<std::mutex> lock(mutex);
  for (const std::string& w : unknown_settings(environment)) {
    if (warned.insert(w.substr(0, w.find(' '))).second) log(log_level::warn, w);
  }
}

const char* config::process_environment(const char* name) { return std::getenv(name); }

const char* config::read_variable(const char* name, const env_lookup& getenv) {
  for (const auto* table : {&settings(), &rendezvous_settings()}) {
    for (const setting_info& s : *table) {
      if (std::strcmp(s.name, name) == 0) return getenv(name);
    }
  }
  throw std::logic_error(std::string("config::read_variable: ") + name +
                         " is not a DistComm setting: add it to settings() or "
                         "rendezvous_settings() (src/config.cpp) and to README.md's table");
}

const char* config::read_variable(const char* name) {
  return read_variable(name, process_environment);
}

config config::from_env() {
  config c = from_env(process_environment);
  if (c.log >= log_level::warn) warn_unknown_settings();
  return c;
}

config config::from_env(const env_lookup& getenv) {
  config c;
  const auto get = [&](const char* name, std::string& out) {
    const char* v = read_variable(name, getenv);
    if (v == nullptr || *v == '\0') return false;
    out = v;
    return true;
  };
  std::string v;
  if (get("DISTCOMM_TIMEOUT", v)) {
    c.timeout = std::chrono::duration<double>(parse_seconds("DISTCOMM_TIMEOUT", v));
  }
  if (get("DISTCOMM_FUSION_THRESHOLD", v)) {
    c.fusion_threshold = parse_bytes(v, "DISTCOMM_FUSION_THRESHOLD");
  }
  if (get("DISTCOMM_FUSION_CUTOFF", v)) c.fusion_cutoff = parse_bytes(v, "DISTCOMM_FUSION_CUTOFF");
  if (get("DISTCOMM_SEGMENT_SIZE", v)) {
    const std::size_t bytes = parse_bytes(v, "DISTCOMM_SEGMENT_SIZE");
    if (!valid_segment_bytes(bytes)) {
      throw invalid_argument_error(quote("DISTCOMM_SEGMENT_SIZE", v) +
                                   " is outside 64 bytes .. 1G");
    }
    c.segment_bytes = bytes;
  }
  if (get("DISTCOMM_PS_SERVERS", v)) c.ps_servers = parse_count("DISTCOMM_PS_SERVERS", v);
  if (get("DISTCOMM_ALGO", v)) c.algo = algo_table::parse(v, "DISTCOMM_ALGO");
  if (get("DISTCOMM_DETERMINISTIC", v)) {
    c.deterministic = parse_bool("DISTCOMM_DETERMINISTIC", v);
  }
  if (get("DISTCOMM_MISMATCH_CHECK", v)) {
    c.mismatch_check = parse_bool("DISTCOMM_MISMATCH_CHECK", v);
  }
  if (get("DISTCOMM_BACKEND", v)) {
    // A built-in backend, or the name of a plugin (libdistcomm_backend_<name>.so), optionally
    // written plugin:<name>.
    const std::string name = v.rfind("plugin:", 0) == 0 ? v.substr(7) : v;
    const bool plugin_name =
        !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char ch) {
          return std::isalnum(ch) || ch == '_' || ch == '-';
        });
    if (!plugin_name) {
      throw invalid_argument_error(quote("DISTCOMM_BACKEND", v) +
                                   " is not a backend (local, mpi, gloo, ucx, nccl, or the name "
                                   "of a plugin: letters, digits, '_' and '-')");
    }
    c.backend = v;
  }
  if (get("DISTCOMM_STRATEGY", v)) {
    try {
      c.strategy = find_strategy(v).name;
    } catch (const invalid_argument_error& e) {
      throw invalid_argument_error("DISTCOMM_STRATEGY: " + std::string(e.what()));
    }
  }
  if (get("DISTCOMM_LOG", v)) {
    bool known = false;
    for (log_level l : {log_level::error, log_level::warn, log_level::info, log_level::debug}) {
      if (lower(v) == distcomm::to_string(l)) {
        c.log = l;
        known = true;
      }
    }
    if (!known) {
      throw invalid_argument_error(quote("DISTCOMM_LOG", v) +
                                   " is not a log level (error, warn, info, debug)");
    }
  }
  if (get("DISTCOMM_CYCLE_TIME", v)) {
    c.cycle_time = std::chrono::duration<double>(parse_seconds("DISTCOMM_CYCLE_TIME", v) / 1000.0);
  }
  if (get("DISTCOMM_STALL_WARNING", v)) {
    c.stall_warning =
        std::chrono::duration<double>(v == "0" ? 0.0 : parse_seconds("DISTCOMM_STALL_WARNING", v));
  }
  if (get("DISTCOMM_TIMELINE", v)) {
    for (std::size_t i = v.find('%'); i != std::string::npos; i = v.find('%', i + 2)) {
      if (i + 1 >= v.size() || v[i + 1] != 'r') {
        throw invalid_argument_error(quote("DISTCOMM_TIMELINE", v) +
                                     ": only %r (the rank) is replaced in the file name");
      }
    }
    c.timeline = v;
  }
  if (get("DISTCOMM_FLIGHT_RECORDER", v)) {
    c.flight_recorder =
        v == "0" ? 0 : static_cast<std::size_t>(parse_count("DISTCOMM_FLIGHT_RECORDER", v));
  }
  if (get("DISTCOMM_DUMP_DIR", v) && !v.empty()) {
    struct stat st {};
    if (::stat(v.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(v.c_str(), W_OK) != 0) {
      throw invalid_argument_error(quote("DISTCOMM_DUMP_DIR", v) +
                                   " is not a directory this process can write (create it first)");
    }
    c.dump_dir = v;
  }
  if (get("DISTCOMM_AUTOTUNE", v)) c.autotune = parse_bool("DISTCOMM_AUTOTUNE", v);
  if (get("DISTCOMM_AUTOTUNE_FILE", v)) {
    struct stat st {};
    const std::size_t slash = v.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : v.substr(0, slash + 1);
    if ((::stat(v.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) || ::stat(folder.c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      throw invalid_argument_error(quote("DISTCOMM_AUTOTUNE_FILE", v) +
                                   " is not a file in an existing directory");
    }
    c.autotune_file = v;
  }
  if (get("DISTCOMM_AUTOTUNE_STEPS", v)) {
    c.autotune_steps = parse_count("DISTCOMM_AUTOTUNE_STEPS", v);
    if (c.autotune_steps < 1 || c.autotune_steps > 1000) {
      throw invalid_argument_error(quote("DISTCOMM_AUTOTUNE_STEPS", v) + " is outside 1 .. 1000");
    }
  }
  if (get("DISTCOMM_IFACE", v)) {
    // Whether this host has it is checked where it is used (rendezvous/interface.hpp), before the
    // ranks meet; here only its form.
    if (std::any_of(v.begin(), v.end(), [](unsigned char ch) { return std::isspace(ch) != 0; })) {
      throw invalid_argument_error(quote("DISTCOMM_IFACE", v) +
                                   " is not a network interface, address or subnet (e.g. eth0, "
                                   "10.1.0.2 or 10.1.0.0/24)");
    }
    c.iface = v;
  }
  if (get("DISTCOMM_HIERARCHICAL", v)) {
    const std::string l = lower(v);
    if (l != "auto" && l != "off") (void)parse_bytes(v, "DISTCOMM_HIERARCHICAL");
    c.hierarchical = l == "auto" || l == "off" ? l : v;
  }
  // Free-form, but one line: to_string() prints one setting a line.
  const auto one_line = [&](const char* name, std::string& field) {
    if (!get(name, v)) return;
    if (std::any_of(v.begin(), v.end(), [](unsigned char ch) { return std::iscntrl(ch) != 0; })) {
      throw invalid_argument_error(quote(name, v) +
                                   " holds a control character (a line break?): give it on one "
                                   "line");
    }
    field = v;
  };
  one_line("DISTCOMM_PLUGIN_PATH", c.plugin_path);
  one_line("DISTCOMM_PLUGIN_OPTIONS", c.plugin_options);
  return c;
}

std::string config::to_string() const {
  std::ostringstream os;
  os << "DISTCOMM_TIMEOUT=" << timeout.count() << '\n'
     << "DISTCOMM_FUSION_THRESHOLD=" << format_bytes(fusion_threshold) << '\n'
     << "DISTCOMM_FUSION_CUTOFF="
     << (fusion_cutoff ? format_bytes(*fusion_cutoff) : std::string("(backend default)")) << '\n'
     << "DISTCOMM_SEGMENT_SIZE="
     << (segment_bytes ? format_bytes(*segment_bytes) : std::string("(backend default)")) << '\n'
     << "DISTCOMM_PS_SERVERS=" << ps_servers << '\n'
     << "DISTCOMM_ALGO=" << (algo.empty() ? std::string("(built-in)") : algo.to_string()) << '\n'
     << "DISTCOMM_DETERMINISTIC=" << (deterministic ? 1 : 0) << '\n'
     << "DISTCOMM_MISMATCH_CHECK=" << (mismatch_check ? 1 : 0) << '\n'
     << "DISTCOMM_BACKEND=" << (backend.empty() ? std::string("(default)") : backend) << '\n'
     << "DISTCOMM_STRATEGY=" << (strategy.empty() ? std::string("(default)") : strategy) << '\n'
     << "DISTCOMM_LOG=" << distcomm::to_string(log) << '\n'
     << "DISTCOMM_CYCLE_TIME=" << cycle_time.count() * 1000.0 << '\n'
     << "DISTCOMM_STALL_WARNING=" << stall_warning.count() << '\n'
     << "DISTCOMM_TIMELINE=" << (timeline.empty() ? std::string("(none)") : timeline) << '\n'
     << "DISTCOMM_FLIGHT_RECORDER=" << flight_recorder << '\n'
     << "DISTCOMM_DUMP_DIR=" << dump_dir << '\n'
     << "DISTCOMM_AUTOTUNE=" << (autotune ? 1 : 0) << '\n'
     << "DISTCOMM_AUTOTUNE_FILE=" << (autotune_file.empty() ? std::string("(none)") : autotune_file)
     << '\n'
     << "DISTCOMM_AUTOTUNE_STEPS=" << autotune_steps << '\n'
     << "DISTCOMM_IFACE=" << iface << '\n'
     << "DISTCOMM_HIERARCHICAL=" << hierarchical << '\n'
     << "DISTCOMM_PLUGIN_PATH=" << plugin_path << '\n'
     << "DISTCOMM_PLUGIN_OPTIONS=" << plugin_options << '\n';
  return os.str();
}

}  // namespace distcomm
