// The one typed configuration of DistComm. Every DISTCOMM_* variable the library reads is listed
// in settings() or rendezvous_settings() and read through config: the settings by config::from_env,
// validated (garbage raises invalid_argument_error naming the variable and the value) and
// printable with to_string(); the job's description by the rendezvous through
// config::read_variable.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/log.hpp"
#include "distcomm/strategy/table.hpp"

namespace distcomm {

struct config {
  // Deadline for every wait of one collective (DISTCOMM_TIMEOUT, seconds).
  std::chrono::duration<double> timeout{300.0};
  // Tensor Fusion buffer size in bytes; 0 disables fusion (DISTCOMM_FUSION_THRESHOLD).
  std::size_t fusion_threshold = std::size_t{64} << 20;
  // Tensors of at least this many bytes are reduced in place instead of being packed; 0 packs
  // every tensor below the threshold (DISTCOMM_FUSION_CUTOFF). Unset: the backend's default
  // (fusion_cutoff_for in backend.hpp), which a communicator fills in.
  std::optional<std::size_t> fusion_cutoff;
  // Pipelining unit of ring / tree / parameter server, bytes (DISTCOMM_SEGMENT_SIZE). Unset: the
  // backend's default (segment_bytes_for in backend.hpp), which a communicator fills in.
  std::optional<std::size_t> segment_bytes;
  // Server ranks of the parameter_server strategy; 0 means every rank (DISTCOMM_PS_SERVERS).
  int ps_servers = 1;
  // Per-size table of strategy::automatic; empty means the built-in table (DISTCOMM_ALGO).
  algo_table algo;
  // Reduce every element in rank order so results do not depend on strategy or fusion
  // (DISTCOMM_DETERMINISTIC).
  bool deterministic = false;
  // Before every collective, ranks agree on a fingerprint of the call (kind, dtype, count, op,
  // root, sequence number, settings) so a mismatch is a mismatch_error on every rank instead of
  // wrong data or a hang (DISTCOMM_MISMATCH_CHECK).
  bool mismatch_check = true;
  // Backend of distcomm::init() and the tools when none is named in code (DISTCOMM_BACKEND).
  std::string backend;
  // Strategy of distcomm::init() and the tools when none is named in code, as the strategy
  // registry spells it (DISTCOMM_STRATEGY); empty means auto.
  std::string strategy;
  // DISTCOMM_LOG.
  log_level log = log_level::warn;
  // The engine's cycle while tensors are pending: how long it gathers submissions before the
  // ranks agree on what is ready (DISTCOMM_CYCLE_TIME, milliseconds).
  std::chrono::duration<double> cycle_time{0.001};
  // A rank waiting longer than this in a collective, the engine or the start-up rendezvous logs
  // which ranks it waits for, and again after each further period; 0 turns it off
  // (DISTCOMM_STALL_WARNING, seconds).
  std::chrono::duration<double> stall_warning{60.0};
  // Chrome trace of every collective and engine phase; %r becomes the rank; empty: none
  // (DISTCOMM_TIMELINE).
  std::string timeline;
  // Collectives each communicator remembers for the hang forensics (trace/flight_recorder.hpp);
  // 0 turns the recorder off (DISTCOMM_FLIGHT_RECORDER).
  std::size_t flight_recorder = 1024;
  // Directory the flight recorders are written to, one JSON file per rank, when a collective
  // fails, on SIGUSR1 and on request; empty: not written (DISTCOMM_DUMP_DIR).
  std::string dump_dir;
  // The engine tries fusion thresholds and cut-offs, cycle times, segment sizes and strategy
  // cut-offs during the first steps and keeps the fastest, the same on every rank
  // (DISTCOMM_AUTOTUNE; autotune/tuner.hpp).
  bool autotune = false;
  // A choice saved by an earlier search: used instead of searching when the file exists and was
  // made for this backend and world size; written when a search ends (DISTCOMM_AUTOTUNE_FILE).
  std::string autotune_file;
  // Steps each candidate of the search runs for (DISTCOMM_AUTOTUNE_STEPS).
  int autotune_steps = 5;
  // Network interface, address or subnet the TCP transports use (gloo binds it, ucx takes its
  // interface); empty: 127.0.0.1 on one node, else the host name (DISTCOMM_IFACE).
  std::string iface;
  // What init() makes of a job across hosts with several ranks on each: "auto" (hierarchical from
  // hierarchical_threshold_default), "off" (flat), or the size to start from
  // (DISTCOMM_HIERARCHICAL).
  std::string hierarchical = "auto";
  // Colon-separated folders searched for backend plugins before the installation's plugin folder
  // (DISTCOMM_PLUGIN_PATH).
  std::string plugin_path;
  // Free-form text handed to a backend plugin when it starts (DISTCOMM_PLUGIN_OPTIONS).
  std::string plugin_options;

  using env_lookup = std::function<const char*(const char*)>;

  // Reads every DISTCOMM_* variable from the process environment, and warns (once per name and
  // process) about those DistComm does not know: see warn_unknown_settings().
  static config from_env();
  // Same, from any lookup (tests inject environments this way).
  static config from_env(const env_lookup& getenv);

  // One `NAME=value` line per setting, in settings() order.
  std::string to_string() const;

  // The process environment (getenv): the lookup from_env() and the rendezvous read when given
  // none.
  static const char* process_environment(const char* name);
  // The value of the DISTCOMM_* variable `name` in `getenv`, null when it is not set: the one way
  // DistComm's code reads its variables, so that every variable it reads is one settings() or
  // rendezvous_settings() documents (std::logic_error for any other name).
  static const char* read_variable(const char* name, const env_lookup& getenv);
  static const char* read_variable(const char* name);  // from the process environment
};

// The segment sizes DistComm accepts (DISTCOMM_SEGMENT_SIZE, communicator::retune, a saved
// autotune choice).
inline constexpr std::size_t min_segment_bytes = 64;
inline constexpr std::size_t max_segment_bytes = std::size_t{1} << 30;
inline bool valid_segment_bytes(std::size_t bytes) noexcept {
  return bytes >= min_segment_bytes && bytes <= max_segment_bytes;
}

// The settings a communicator can change between two collectives (communicator::retune): what the
// engine's autotuner tries. Every field is set, none left to the backend.
struct tuning {
  std::size_t fusion_threshold = 0;
  std::size_t fusion_cutoff = 0;
  std::size_t segment_bytes = 0;
  algo_table algo;  // strategy::automatic's table; empty: the backend's own
  // A hierarchical communicator's (hierarchical.hpp): allreduces of at least this many bytes go
  // the hierarchical way. 0: a flat communicator's tuning, or (to retune) leave it as it is.
  std::size_t hierarchical_threshold = 0;
  bool operator==(const tuning& o) const {
    return fusion_threshold == o.fusion_threshold && fusion_cutoff == o.fusion_cutoff &&
           segment_bytes == o.segment_bytes && algo.to_string() == o.algo.to_string() &&
           hierarchical_threshold == o.hierarchical_threshold;
  }
};

// Documentation of every setting: name, default, meaning. The README table lists the same rows
// (a test checks that it does).
struct setting_info {
  const char* name;
  const char* default_value;
  const char* description;
};
const std::vector<setting_info>& settings();
// The variables that describe the job (rank, master, store, token) and the shm backend's sizes:
// read by detect_world(), bootstrap() and that backend rather than into a config, documented in
// the same README table.
const std::vector<setting_info>& rendezvous_settings();

// One warning for each DISTCOMM_* variable of `environment` ("NAME=value" entries, as in
// `environ`) that DistComm does not read, naming the closest known variable when one is near:
// "DISTCOMM_TIMOUT is not a DistComm setting and is ignored; did you mean DISTCOMM_TIMEOUT?".
// Known: settings(), rendezvous_settings() and the few variables only the tools and the
// project's scripts read (DISTCOMM_MPIRUN, ...).
std::vector<std::string> unknown_settings(const std::vector<std::string>& environment);
// Logs unknown_settings() of the process environment as warnings, each name once per process.
// config::from_env() calls it.
void warn_unknown_settings();

}  // namespace distcomm
