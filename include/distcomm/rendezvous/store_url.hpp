// The job's store named by a URL, DISTCOMM_STORE=<scheme>://<address>. etcd:// is built in
// (etcd_store.hpp). Any other scheme is a store plugin, libdistcomm_store_<scheme>.so, opened
// through the opener DistComm::plugin installs (distcomm/plugin/store_plugin.hpp; init() installs
// it). Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True the job's store is the agent's
// c10d TCPStore, named c10d://MASTER_ADDR:MASTER_PORT/worker/attempt_<TORCHELASTIC_RESTART_COUNT>,
// the prefix torch.distributed's own workers use (docs/STORE.md, "Store plugins").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

// What opening a store by URL takes.
struct store_request {
  std::string url;                               // as given, for messages
  std::string scheme;                            // before "://": "etcd", "c10d", ...
  std::string address;                           // after "://"
  std::chrono::duration<double> timeout{300.0};  // to reach the store, then every wait
  std::string token;                             // DISTCOMM_AUTH_TOKEN(_FILE); "" for none
  job_identity job;                              // the job this rank belongs to
  int rank = 0;                                  // the launcher's rank, for messages
};

// "<scheme>://<address>": rendezvous_error naming the text when it has no scheme or no address.
store_request parse_store_url(const std::string& url);

// DISTCOMM_STORE parsed, nullopt when unset or empty.
std::optional<store_request> store_url_from_env(const env_lookup& getenv);

// torchrun's agent store, when TORCHELASTIC_USE_AGENT_STORE=True names it (its MASTER_ADDR and
// MASTER_PORT are world's): "c10d://host:port/worker/attempt_<n>". nullopt otherwise.
std::optional<std::string> torchrun_agent_store_url(const world_info& world,
                                                    const env_lookup& getenv);

// Opens the stores of the schemes not built in; throws when it has none for the scheme.
using store_opener = std::function<std::shared_ptr<store>(const store_request&)>;
// Installs the opener of plugin schemes (one per process; a second call replaces the first).
void set_store_plugin_opener(store_opener open);

// The store the request names, connected: an etcd_store for etcd://, else the plugin's.
// rendezvous_error when the scheme has no store (naming the schemes known and what to do).
std::shared_ptr<store> open_store(const store_request& request);

}  // namespace distcomm
