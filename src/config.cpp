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

std::string quote(const char* name, const std::string& value) {
  return std::string(name) + "='" + value + "'";
}

// The longest time a setting may give: 10^7 s (116 days). Far beyond any job's wait, and far
// from where a deadline (now + the time, in the clock's nanoseconds) would overflow.
constexpr double max_seconds = 1e7;

double parse_seconds(const char* name, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(d) ||
      d <= 0 || d > max_seconds) {
    throw invalid_argument_error(quote(name, v) +
                                 " is not a positive number of seconds up to 10000000 (e.g. 30 "
                                 "or 2.5)");
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

}  // namespace

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
