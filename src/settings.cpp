// The table of every DISTCOMM_* variable, and the one door through which DistComm's code reads
// them (config::read_variable). Standard library only, so that the rendezvous fuzz target and
// the tools can link it alone.
#include "distcomm/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace distcomm {
namespace {

// Every variable DistComm reads. Keep in step with the README settings table (a test checks it).
const std::vector<setting_info> setting_rows = {
    {"DISTCOMM_TIMEOUT", "300",
     "Seconds (more than 0, at most 10000000) any collective may wait for a peer before failing "
     "with timeout_error."},
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
    {"DISTCOMM_STORE", "(unset)",
     "etcd://[user@]host:port[,host:port...]/prefix: the job's store in an etcd cluster."},
    {"DISTCOMM_AUTH_TOKEN", "(unset: no authentication)",
     "Shared secret for the store's HMAC-SHA256 challenge-response; never sent."},
    {"DISTCOMM_AUTH_TOKEN_FILE", "(unset)", "File holding the token (instead of the variable)."},
    {"DISTCOMM_JOB_ID", "(from the launcher)",
     "Names this rank's job in the store handshake; a store refuses a rank of another job."},
    {"DISTCOMM_SHM_RING", "1M",
     "Bytes of each ordered pair's message ring in the shm backend (4K to 1G)."},
    {"DISTCOMM_SHM_CHUNK", "512K",
     "Bytes per rank the shm backend's collectives stage at a time, twice (4K to 1G)."},
    {"DISTCOMM_SHM_SINGLE_COPY", "off",
     "on: the shm backend's large collectives read the peers' buffers straight from their "
     "processes (process_vm_readv) where every rank may; off: through the segments (faster where "
     "measured: docs/PERFORMANCE.md)."},
};

// Read only by the tools and the project's scripts, documented where they are read; known so
// that setting them is not taken for a typo.
const char* const tool_variables[] = {
    "DISTCOMM_MPIRUN",         // distcomm-run --backend mpi (tools/README.md)
    "DISTCOMM_JOBS",           // scripts/common.sh: build and test parallelism
    "DISTCOMM_SKIP_PACKAGES",  // scripts/common.sh: do not install packages
    "DISTCOMM_CACHE",          // scripts/torch.sh: where the torch environments are kept
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

const char* config::process_environment(const char* name) { return std::getenv(name); }

const char* config::read_variable(const char* name, const env_lookup& getenv) {
  for (const auto* table : {&settings(), &rendezvous_settings()}) {
    for (const setting_info& s : *table) {
      if (std::strcmp(s.name, name) == 0) return getenv(name);
    }
  }
  throw std::logic_error(std::string("config::read_variable: ") + name +
                         " is not a DistComm setting: add it to settings() or "
                         "rendezvous_settings() (src/settings.cpp) and to README.md's table");
}

const char* config::read_variable(const char* name) {
  return read_variable(name, process_environment);
}

}  // namespace distcomm
