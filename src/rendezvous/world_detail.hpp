// Internal pieces of world detection shared by world.cpp, hostlist.cpp, tf_config.cpp and the
// fuzz targets: strict value parsing, the Slurm list parsers and the TF_CONFIG reader. Not
// installed; not for users.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace distcomm::detail {

// 'value' for messages: single-quoted, control bytes and quotes shown as \xNN, cut after 80
// characters.
std::string quote(const std::string& value);
// `NAME=value` for messages: the value is single-quoted when it is empty or holds spaces,
// quotes or control bytes (shown as \xNN), and cut after 80 characters.
std::string show_var(const std::string& name, const std::string& value);

// A port written as 1..65535, digits only; nullopt otherwise.
std::optional<int> port_value(const std::string& text);

// `host:port` or `[v6]:port`; host non-empty without spaces, port 1..65535. `what` names the
// input in messages (`AZ_BATCH_MASTER_NODE`, `TF_CONFIG cluster.worker[1]`).
struct host_port {
  std::string host;
  int port = 0;
};
host_port parse_host_port(const std::string& text, const std::string& what);
// Throws unless text can be a host name or address (non-empty, no spaces or control bytes).
void check_host(const std::string& text, const std::string& what);

// Slurm host lists; `what` prefixes messages (`SLURM_STEP_NODELIST=...` or `host list ...`).
std::string first_host(const std::string& list, const std::string& what);
// Tasks on node `node` of a Slurm tasks-per-node list such as `2(x3),1`; nullopt when the list
// has fewer nodes. Malformed lists throw.
std::optional<int> tasks_on_node(const std::string& list, long long node, const std::string& what);

// TF_CONFIG, mapped to DistComm ranks (see docs/RENDEZVOUS.md): nullopt when it describes no
// cluster (`{}`, or an empty `cluster`: TensorFlow's own single-process case).
struct tf_world {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  int ps = 0;
  std::string task;  // `worker 1`, for messages
  std::string master_host;
  int master_port = 0;
};
std::optional<tf_world> parse_tf_config(const std::string& text);

}  // namespace distcomm::detail
