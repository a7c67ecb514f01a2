// detect_world(): reads each launcher's variables in a fixed order (first match wins), applies
// the DISTCOMM_* overrides, checks the result and fills in a loopback master where that is safe.
// docs/RENDEZVOUS.md is the user-facing description of every rule here, and its error table is
// run as a test (tests/unit/test_world.cpp).
#include "distcomm/rendezvous/world.hpp"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "world_detail.hpp"

namespace distcomm {
namespace detail {

std::string quote(const std::string& value) {
  constexpr std::size_t shown = 80;
  std::string out = "'";
  for (std::size_t i = 0; i < value.size() && i < shown; ++i) {
    const auto u = static_cast<unsigned char>(value[i]);
    if (u < 0x20 || u == 0x7f || value[i] == '\'' || value[i] == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    } else {
      out += value[i];
    }
  }
  if (value.size() > shown) out += "...";
  return out + "'";
}

std::string show_var(const std::string& name, const std::string& value) {
  bool plain = !value.empty() && value.size() <= 80;
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    plain = plain && u > 0x20 && u != 0x7f && c != '\'' && c != '"' && c != '\\';
  }
  return name + "=" + (plain ? value : quote(value));
}

void check_host(const std::string& text, const std::string& what) {
  bool ok = !text.empty() && text.size() <= 255;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    ok = ok && u > 0x20 && u != 0x7f;
  }
  if (!ok) throw rendezvous_error("rendezvous: " + what + " is not a host name or address");
}

std::optional<int> port_value(const std::string& text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  int n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > 65535) return std::nullopt;
  return n;
}

host_port parse_host_port(const std::string& text, const std::string& what) {
  host_port hp;
  std::string port;
  if (!text.empty() && text.front() == '[') {  // [v6]:port
    const std::size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw rendezvous_error("rendezvous: " + what + " is not [address]:port");
    }
    hp.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      throw rendezvous_error("rendezvous: " + what + " has no :port (write host:port)");
    }
    hp.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  check_host(hp.host, what);
  const std::optional<int> p = port_value(port);
  if (!p) {
    throw rendezvous_error("rendezvous: " + what + " has port " + quote(port) +
                           ", not a port from 1 to 65535");
  }
  hp.port = *p;
  return hp;
}

}  // namespace detail

namespace {

using detail::show_var;

// One number of the world as a launcher gave it, remembered with where it came from.
struct field {
  bool set = false;
  long long value = 0;
  std::string shown;   // `RANK=5`, or `world size 3 from TF_CONFIG`
  std::string source;  // `torchrun-style variables`

  void assign(long long v, std::string how, std::string from) {
    set = true;
    value = v;
    shown = std::move(how);
    source = std::move(from);
  }
};

// What one launcher's variables say, before overrides and checks.
struct candidate {
  launcher_kind kind = launcher_kind::none;
  std::string source;  // for messages
  // Names of this launcher's rank and size variables, for "X is set but Y is not".
  std::string rank_var, size_var;
  field rank, size, local_rank, local_size, node_rank;
  std::string master_addr;
  field master_port;
  int ps_servers = 0;
  bool master_from_nodelist = false;  // derived, not named: loopback is preferred on one node
};

std::string suffix(const field& a, const field& b) {
  if (a.source == b.source) return " (set by " + a.source + ")";
  return " (set by " + a.source + " and " + b.source + ")";
}

[[noreturn]] void fail(const std::string& message) {
  throw rendezvous_error("rendezvous: " + message);
}

class environment {
 public:
  explicit environment(const env_lookup& getenv) : getenv_(getenv) {}

  // The value of name; unset and empty read the same. DistComm's own variables go through
  // config, which knows them all; the launchers' are read as they are.
  std::optional<std::string> get(const char* name) const {
    const char* v = std::strncmp(name, "DISTCOMM_", 9) == 0 ? config::read_variable(name, getenv_)
                                                            : getenv_(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  }
  bool has(const char* name) const { return get(name).has_value(); }

  // Reads a non-negative int variable into f, if it is set.
  bool read(field& f, const char* name, const std::string& source) const {
    const std::optional<std::string> text = get(name);
    if (!text) return false;
    f.assign(number(name, *text, source), show_var(name, *text), source);
    return true;
  }

  bool read_port(field& f, const char* name, const std::string& source) const {
    const std::optional<std::string> text = get(name);
    if (!text) return false;
    const std::optional<int> p = detail::port_value(*text);
    if (!p) fail(show_var(name, *text) + " is not a port from 1 to 65535 (set by " + source + ")");
    f.assign(*p, show_var(name, *text), source);
    return true;
  }

  bool read_host(std::string& addr, const char* name) const {
    const std::optional<std::string> text = get(name);
    if (!text) return false;
    detail::check_host(*text, show_var(name, *text));
    addr = *text;
    return true;
  }

  static long long number(const std::string& name, const std::string& text,
                          const std::string& source) {
    const std::string where = " (set by " + source + ")";
    const bool negative = text.size() > 1 && text[0] == '-';
    for (std::size_t i = negative ? 1 : 0; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') {
        fail(show_var(name, text) + " is not a non-negative integer" + where);
      }
    }
    if (negative) fail(show_var(name, text) + " is negative" + where);
    std::size_t first = 0;  // leading zeros do not count towards the length
    while (first + 1 < text.size() && text[first] == '0') ++first;
    long long n = 0;
    if (text.size() - first <= 10) {  // 10 digits cannot overflow a long long
      for (std::size_t i = first; i < text.size(); ++i) n = n * 10 + (text[i] - '0');
    }
    if (text.size() - first > 10 || n > INT_MAX) {
      fail(show_var(name, text) + " is larger than " + std::to_string(INT_MAX) + where);
    }
    return n;
  }

 private:
  const env_lookup& getenv_;
};

// ---- one reader per launcher, in detection order --------------------------------------------

// DISTCOMM_RANK + DISTCOMM_WORLD_SIZE: the fields themselves come from the override pass.
std::optional<candidate> from_distcomm(const environment& env) {
  if (!env.has("DISTCOMM_RANK") || !env.has("DISTCOMM_WORLD_SIZE")) return std::nullopt;
  candidate c;
  c.kind = launcher_kind::distcomm;
  c.source = "DISTCOMM_* variables";
  c.rank_var = "DISTCOMM_RANK";
  c.size_var = "DISTCOMM_WORLD_SIZE";
  return c;
}

// The four variables most launchers use for rank, size, local rank and local size.
struct launcher_vars {
  launcher_kind kind;
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

// A candidate with those four fields read, or nothing when neither rank nor size is set.
std::optional<candidate> read_launcher(const environment& env, const launcher_vars& v) {
  if (!env.has(v.rank) && !env.has(v.size)) return std::nullopt;
  candidate c;
  c.kind = v.kind;
  c.source = v.source;
  c.rank_var = v.rank;
  c.size_var = v.size;
  env.read(c.rank, v.rank, c.source);
  env.read(c.size, v.size, c.source);
  env.read(c.local_rank, v.local_rank, c.source);
  env.read(c.local_size, v.local_size, c.source);
  return c;
}

std::optional<candidate> from_torchrun(const environment& env) {
  std::optional<candidate> found =
      read_launcher(env, {launcher_kind::torchrun, "torchrun-style variables", "RANK", "WORLD_SIZE",
                          "LOCAL_RANK", "LOCAL_WORLD_SIZE"});
  if (!found) return found;
  candidate& c = *found;
  // torchrun says GROUP_RANK, AzureML NODE_RANK; both set must agree.
  field group, node;
  env.read(group, "GROUP_RANK", c.source);
  env.read(node, "NODE_RANK", c.source);
  if (group.set && node.set && group.value != node.value) {
    fail(group.shown + " and " + node.shown + " disagree about this node's rank" +
         suffix(group, node));
  }
  c.node_rank = group.set ? group : node;
  env.read_host(c.master_addr, "MASTER_ADDR");
  env.read_port(c.master_port, "MASTER_PORT", c.source);
  return found;
}

// MASTER_ADDR / MASTER_PORT, for the launchers that name no master of their own.
void generic_master(const environment& env, candidate& c) {
  if (c.master_addr.empty()) env.read_host(c.master_addr, "MASTER_ADDR");
  if (!c.master_port.set) env.read_port(c.master_port, "MASTER_PORT", c.source);
}

std::optional<candidate> from_open_mpi(const environment& env) {
  std::optional<candidate> found = read_launcher(
      env, {launcher_kind::open_mpi, "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  if (!found) return found;
  candidate& c = *found;
  // Not OMPI_COMM_WORLD_NODE_RANK: Open MPI documents it as this process's rank among the
  // processes of *all* jobs on this node, not the index of the node.
  if (const std::optional<std::string> az = env.get("AZ_BATCH_MASTER_NODE")) {
    const detail::host_port hp =
        detail::parse_host_port(*az, show_var("AZ_BATCH_MASTER_NODE", *az));
    c.master_addr = hp.host;
    c.master_port.assign(hp.port, show_var("AZ_BATCH_MASTER_NODE", *az), "AzureML");
  } else {
    env.read_host(c.master_addr, "AZ_BATCHAI_MPI_MASTER_NODE");
  }
  generic_master(env, c);
  return found;
}

std::optional<candidate> from_hydra(const environment& env) {
  std::optional<candidate> found =
      read_launcher(env, {launcher_kind::mpich, "MPICH/Hydra", "PMI_RANK", "PMI_SIZE",
                          "MPI_LOCALRANKID", "MPI_LOCALNRANKS"});
  if (found) generic_master(env, *found);
  return found;
}

// Only inside an srun step (SLURM_STEP_ID set): an sbatch script or salloc shell also carries
// SLURM_PROCID=0 and SLURM_NTASKS=N, but a program started there without srun is one process.
std::optional<candidate> from_slurm(const environment& env) {
  if (!env.has("SLURM_PROCID")) return std::nullopt;
  if (!env.has("SLURM_STEP_ID") && !env.has("SLURM_STEPID")) return std::nullopt;
  candidate c;
  c.kind = launcher_kind::slurm;
  c.source = "Slurm";
  c.rank_var = "SLURM_PROCID";
  c.size_var = "SLURM_NTASKS";
  env.read(c.rank, "SLURM_PROCID", c.source);
  // The step's own count first: with `srun --preserve-env` SLURM_NTASKS is the allocation's.
  if (!env.read(c.size, "SLURM_STEP_NUM_TASKS", c.source)) {
    env.read(c.size, "SLURM_NTASKS", c.source);
  }
  env.read(c.local_rank, "SLURM_LOCALID", c.source);
  env.read(c.node_rank, "SLURM_NODEID", c.source);
  const std::optional<std::string> tpn = env.get("SLURM_STEP_TASKS_PER_NODE");
  const std::string tpn_what = tpn ? show_var("SLURM_STEP_TASKS_PER_NODE", *tpn) : "";
  // One count per node (checked even when unused); which one is ours needs SLURM_NODEID.
  const std::optional<int> n =
      tpn ? detail::tasks_on_node(*tpn, c.node_rank.value, tpn_what) : std::nullopt;
  if (tpn && c.node_rank.set) {
    if (!n) fail(c.node_rank.shown + " is beyond the nodes of " + tpn_what + " (set by Slurm)");
    c.local_size.assign(*n, tpn_what + " for node " + std::to_string(c.node_rank.value), c.source);
  } else {
    env.read(c.local_size, "SLURM_NTASKS_PER_NODE", c.source);
  }
  generic_master(env, c);
  const char* list_var =
      env.has("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (const std::optional<std::string> list = env.get(list_var)) {
    const std::string first = detail::first_host(*list, show_var(list_var, *list));
    if (c.master_addr.empty()) {
      c.master_addr = first;
      c.master_from_nodelist = true;
    }
  }
  return c;
}

std::optional<candidate> from_tf_config(const environment& env) {
  const std::optional<std::string> text = env.get("TF_CONFIG");
  if (!text) return std::nullopt;
  const std::optional<detail::tf_world> tf = detail::parse_tf_config(*text);
  if (!tf) return std::nullopt;
  candidate c;
  c.kind = launcher_kind::tf_config;
  c.source = "TF_CONFIG";
  const std::string task = " of TF_CONFIG task " + tf->task;
  c.rank.assign(tf->rank, "rank " + std::to_string(tf->rank) + task, c.source);
  c.size.assign(tf->size, "world size " + std::to_string(tf->size) + " from TF_CONFIG", c.source);
  c.local_rank.assign(tf->local_rank, "local rank " + std::to_string(tf->local_rank) + task,
                      c.source);
  c.local_size.assign(tf->local_size, "local size " + std::to_string(tf->local_size) + task,
                      c.source);
  c.node_rank.assign(tf->node_rank, "node " + std::to_string(tf->node_rank) + task, c.source);
  c.master_addr = tf->master_host;
  c.master_port.assign(tf->master_port, "TF_CONFIG's first task", c.source);
  c.ps_servers = tf->ps;
  return c;
}

// PMIx exports PMIX_RANK but no size (PMIx_server_setup_fork sets PMIX_NAMESPACE, PMIX_RANK and
// the server URI), and every PMIx launcher we know also sets its own variables (Open MPI's
// mpirun, srun --mpi=pmix), so PMIX_RANK is consulted last, when nothing else matched.
std::optional<candidate> from_pmix(const environment& env) {
  if (!env.has("PMIX_RANK")) return std::nullopt;
  candidate c;
  c.kind = launcher_kind::mpich;
  c.source = "PMIx";
  c.rank_var = "PMIX_RANK";
  c.size_var = "DISTCOMM_WORLD_SIZE";
  env.read(c.rank, "PMIX_RANK", c.source);
  generic_master(env, c);
  return c;
}

// RANK / OMPI_COMM_WORLD_* / PMI_* describe the process the same launcher started; a second
// set that describes a *larger* world, or the same size with another rank, is stale (an image
// exporting RANK=0 WORLD_SIZE=1, a wrapper script) and would silently split the job. A smaller
// second world is an outer launcher (torchrun started by mpirun per node) and is fine. Slurm and
// TF_CONFIG are not compared: Slurm's variables describe the allocation every mpirun or torchrun
// inside it inherits.
void check_agreement(const environment& env, const candidate& c) {
  if (env.has("DISTCOMM_RANK") || env.has("DISTCOMM_WORLD_SIZE")) return;  // settled by hand
  if (!c.rank.set || !c.size.set) return;
  struct pair {
    launcher_kind kind;
    const char* rank;
    const char* size;
    const char* source;
  };
  for (const pair& p :
       {pair{launcher_kind::torchrun, "RANK", "WORLD_SIZE", "torchrun-style variables"},
        pair{launcher_kind::open_mpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
        pair{launcher_kind::mpich, "PMI_RANK", "PMI_SIZE", "MPICH/Hydra"}}) {
    if (p.kind == c.kind) continue;
    field rank, size;
    if (!env.read(rank, p.rank, p.source) || !env.read(size, p.size, p.source)) continue;
    if (size.value > c.size.value || (size.value == c.size.value && rank.value != c.rank.value)) {
      fail(c.rank.shown + " " + c.size.shown + " (" + c.source + ") and " + rank.shown + " " +
           size.shown + " (" + p.source +
           ") describe different worlds; unset the stale ones, or set DISTCOMM_RANK and "
           "DISTCOMM_WORLD_SIZE to say which is meant");
    }
  }
}

// DISTCOMM_* variables override whatever the launcher said, field by field.
void apply_overrides(const environment& env, candidate& c) {
  const std::string source = "DISTCOMM_* variables";
  env.read(c.rank, "DISTCOMM_RANK", source);
  env.read(c.size, "DISTCOMM_WORLD_SIZE", source);
  env.read(c.local_rank, "DISTCOMM_LOCAL_RANK", source);
  env.read(c.local_size, "DISTCOMM_LOCAL_WORLD_SIZE", source);
  env.read(c.node_rank, "DISTCOMM_NODE_RANK", source);
  if (env.read_host(c.master_addr, "DISTCOMM_MASTER_ADDR")) {
    c.master_from_nodelist = false;
  }
  env.read_port(c.master_port, "DISTCOMM_MASTER_PORT", source);
}

world_info check(candidate& c) {
  if (c.rank.set && !c.size.set) {
    if (c.source == "PMIx") {
      fail(c.rank.shown +
           " is set but PMIx exports no world size: run under a launcher that "
           "does (mpirun, srun) or set DISTCOMM_WORLD_SIZE");
    }
    fail(c.rank.shown + " is set but " + c.size_var + " is not (set by " + c.rank.source + ")" +
         (c.size_var == "DISTCOMM_WORLD_SIZE" ? "" : "; set both, or DISTCOMM_WORLD_SIZE"));
  }
  if (c.size.set && !c.rank.set) {
    fail(c.size.shown + " is set but " + c.rank_var + " is not (set by " + c.size.source + ")" +
         (c.rank_var == "DISTCOMM_RANK" ? "" : "; set both, or DISTCOMM_RANK"));
  }
  world_info w;
  w.launcher = c.kind;
  w.ps_servers = c.ps_servers;
  if (c.size.set) {
    if (c.size.value < 1)
      fail(c.size.shown + " is not a positive world size" + suffix(c.size, c.size));
    if (c.rank.value >= c.size.value) {
      fail(c.rank.shown + " is not below " + c.size.shown + suffix(c.rank, c.size));
    }
    w.rank = static_cast<int>(c.rank.value);
    w.size = static_cast<int>(c.size.value);
  }
  if (c.ps_servers > w.size) {  // only an override can shrink the world below its ps tasks
    fail("TF_CONFIG names " + std::to_string(c.ps_servers) + " ps tasks, more than " +
         c.size.shown + suffix(c.size, c.size) + "; every ps task is a rank");
  }
  if (c.local_size.set) {
    if (!c.local_rank.set) {
      fail(c.local_size.shown + " is set but no local rank is" +
           suffix(c.local_size, c.local_size));
    }
    if (c.local_size.value < 1) {
      fail(c.local_size.shown + " is not a positive local size" +
           suffix(c.local_size, c.local_size));
    }
    if (c.local_rank.value >= c.local_size.value) {
      fail(c.local_rank.shown + " is not below " + c.local_size.shown +
           suffix(c.local_rank, c.local_size));
    }
    if (c.local_size.value > w.size) {
      fail(c.local_size.shown + " is larger than " +
           (c.size.set ? c.size.shown : std::string("the world size 1")) +
           suffix(c.local_size, c.size.set ? c.size : c.local_size));
    }
    w.local_size = static_cast<int>(c.local_size.value);
  } else if (c.local_rank.set) {
    // The launcher gave no local size: take the smallest its local rank allows, so
    // single_node() is true only when it surely is.
    if (c.local_rank.value >= w.size) {
      fail(c.local_rank.shown + " is not below the world size " + std::to_string(w.size) +
           suffix(c.local_rank, c.size.set ? c.size : c.local_rank));
    }
    w.local_size = static_cast<int>(c.local_rank.value) + 1;
  }
  w.local_rank = static_cast<int>(c.local_rank.value);
  if (c.node_rank.value >= w.size) {
    fail(c.node_rank.shown + " is not below the world size " + std::to_string(w.size) +
         suffix(c.node_rank, c.size.set ? c.size : c.node_rank));
  }
  w.node_rank = static_cast<int>(c.node_rank.value);
  w.master_port = static_cast<int>(c.master_port.value);
  // A master the launcher named is kept; one derived from Slurm's node list gives way to
  // loopback on a single node (where both mean this host, and loopback needs no name lookup).
  if ((c.master_addr.empty() || c.master_from_nodelist) && w.single_node()) {
    w.master_addr = "127.0.0.1";
    w.loopback_master = true;
  } else {
    w.master_addr = c.master_addr;
  }
  return w;
}

}  // namespace

const char* to_string(launcher_kind k) noexcept {
  switch (k) {
    case launcher_kind::distcomm:
      return "distcomm";
    case launcher_kind::torchrun:
      return "torchrun";
    case launcher_kind::open_mpi:
      return "open_mpi";
    case launcher_kind::mpich:
      return "mpich";
    case launcher_kind::slurm:
      return "slurm";
    case launcher_kind::tf_config:
      return "tf_config";
    case launcher_kind::none:
      return "none";
  }
  return "none";
}

std::string world_info::to_string() const {
  std::string s = "rank " + std::to_string(rank) + "/" + std::to_string(size) + " (local " +
                  std::to_string(local_rank) + "/" + std::to_string(local_size) + ", node " +
                  std::to_string(node_rank) + ") master ";
  if (master_addr.empty() && master_port == 0) {
    s += "unset";
  } else {
    const bool v6 = master_addr.find(':') != std::string::npos;
    s += master_addr.empty() ? "?" : v6 ? "[" + master_addr + "]" : master_addr;
    s += ":" + (master_port == 0 ? std::string("?") : std::to_string(master_port));
    if (loopback_master) s += " (loopback)";
  }
  s += " from ";
  s += distcomm::to_string(launcher);
  if (ps_servers > 0) s += " (ps_servers " + std::to_string(ps_servers) + ")";
  return s;
}

world_info detect_world() { return detect_world(config::process_environment); }

world_info detect_world(const env_lookup& getenv) {
  const environment env(getenv);
  using reader = std::optional<candidate> (*)(const environment&);
  std::optional<candidate> found;
  for (const reader r :
       {reader{from_distcomm}, reader{from_torchrun}, reader{from_open_mpi}, reader{from_hydra},
        reader{from_slurm}, reader{from_tf_config}, reader{from_pmix}}) {
    found = r(env);
    if (found) break;
  }
  candidate c = found ? *found : candidate{};
  if (!found) {
    c.source = "DISTCOMM_* variables";
    c.rank_var = "DISTCOMM_RANK";
    c.size_var = "DISTCOMM_WORLD_SIZE";
  }
  check_agreement(env, c);
  apply_overrides(env, c);
  return check(c);
}

void require_master(const world_info& w) {
  if (!w.master_addr.empty() && w.master_port != 0) return;
  const std::string missing = w.master_addr.empty() && w.master_port == 0
                                  ? "no master address or port"
                              : w.master_addr.empty() ? "no master address"
                                                      : "no master port";
  std::string message = "this " + std::to_string(w.size) + "-rank world (" +
                        distcomm::to_string(w.launcher) + ") has " + missing + "; ";
  // Launchers that name a master read MASTER_ADDR/MASTER_PORT; the others only DISTCOMM_*.
  bool generic = false;
  bool mpi = false;
  switch (w.launcher) {
    case launcher_kind::distcomm:
    case launcher_kind::tf_config:
    case launcher_kind::none:
      break;
    case launcher_kind::torchrun:
      generic = true;
      break;
    case launcher_kind::open_mpi:
    case launcher_kind::mpich:
    case launcher_kind::slurm:
      generic = mpi = true;
      break;
  }
  if (w.master_addr.empty()) {
    message += generic ? "set MASTER_ADDR and MASTER_PORT (or DISTCOMM_MASTER_ADDR/PORT)"
                       : "set DISTCOMM_MASTER_ADDR and DISTCOMM_MASTER_PORT";
    if (w.launcher == launcher_kind::open_mpi) message += ", or AZ_BATCH_MASTER_NODE=host:port,";
    message += " to rank 0's host and a free port";
  } else {
    message += generic ? "set MASTER_PORT (or DISTCOMM_MASTER_PORT)" : "set DISTCOMM_MASTER_PORT";
    message += " to a free port on rank 0's host " + w.master_addr;
  }
  if (mpi) message += ", or use the MPI backend, which bootstraps through MPI";
  fail(message);
}

}  // namespace distcomm
