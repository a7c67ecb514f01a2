// The job's store by URL (store_url.hpp): the built-in scheme, the plugin opener, torchrun's
// agent store, and the job identity a plugin store is checked against.
#include "distcomm/rendezvous/store_url.hpp"

#include <mutex>
#include <string>
#include <utility>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/etcd_store.hpp"
#include "store_detail.hpp"
#include "store_socket.hpp"

namespace distcomm {
namespace {

std::mutex opener_mu;
store_opener& plugin_opener() {
  static store_opener* open = new store_opener();  // never destroyed: stores outlive exit
  return *open;
}

// Where a plugin store keeps the identity of the job it serves, as "<world size> <id>".
const char* const job_key = "distcomm/job";

std::string said(const job_identity& j) {
  return (j.id.empty() ? std::string("no id") : "job '" + j.id + "'") + ", " +
         (j.world_size > 0 ? std::to_string(j.world_size) + " ranks" : "no world size");
}

// The store must serve this job alone: the first rank to reach it writes the job's identity,
// and a rank of another job (another world size or id under the same address) is refused.
void claim(store& s, const store_request& r) {
  const std::string mine = detail::job_text(r.job);
  const bytes got = s.compare_set(job_key, {}, bytes(mine.begin(), mine.end()));
  // Text that is not a job's (another program's key) agrees with no job.
  const job_identity theirs =
      detail::job_from_text(std::string(got.begin(), got.end())).value_or(job_identity{-1, {}});
  if (!same_job(theirs, r.job)) {
    throw rendezvous_error("rank " + std::to_string(r.rank) + ": the store " + r.url +
                           " belongs to another job (" + said(theirs) + "; this rank's " +
                           said(r.job) + "): give each job a store or prefix of its own");
  }
}

}  // namespace

store_request parse_store_url(const std::string& url) {
  const auto sep = url.find("://");
  if (sep == std::string::npos || sep == 0 || sep + 3 >= url.size()) {
    throw rendezvous_error("DISTCOMM_STORE='" + url +
                           "' is not <scheme>://<address> (e.g. etcd://10.0.0.1:2379/jobs/"
                           "train-42, or c10d://10.0.0.1:29500/prefix for a c10d TCPStore)");
  }
  store_request r;
  r.url = url;
  r.scheme = url.substr(0, sep);
  r.address = url.substr(sep + 3);
  return r;
}

std::optional<store_request> store_url_from_env(const env_lookup& getenv) {
  const char* raw = config::read_variable("DISTCOMM_STORE", getenv);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return parse_store_url(raw);
}

std::optional<std::string> torchrun_agent_store_url(const world_info& world,
                                                    const env_lookup& getenv) {
  const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent == nullptr || std::string(agent) != "True") return std::nullopt;
  if (world.master_addr.empty() || world.master_port == 0) {
    throw rendezvous_error(
        "TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent hosts this job's store, but "
        "MASTER_ADDR or MASTER_PORT is missing: start the program with torchrun, or unset "
        "TORCHELASTIC_USE_AGENT_STORE");
  }
  const char* attempt = getenv("TORCHELASTIC_RESTART_COUNT");
  return "c10d://" + detail::host_port(world.master_addr, world.master_port) + "/worker/attempt_" +
         (attempt != nullptr && *attempt != '\0' ? attempt : "0");
}

void set_store_plugin_opener(store_opener open) {
  std::lock_guard<std::mutex> lk(opener_mu);
  plugin_opener() = std::move(open);
}

std::shared_ptr<store> open_store(const store_request& r) {
  if (r.scheme == "etcd") {
    return std::make_shared<etcd_store>(parse_etcd_url(r.url), r.timeout, r.token, r.job);
  }
  store_opener open;
  {
    std::lock_guard<std::mutex> lk(opener_mu);
    open = plugin_opener();
  }
  if (!open) {
    throw rendezvous_error(
        "DISTCOMM_STORE='" + r.url + "' names a '" + r.scheme +
        "' store, which only a store plugin (libdistcomm_store_" + r.scheme +
        ".so) provides, and this program has no plugin loader: start the job through "
        "distcomm::init() (DistComm::DistComm), or call distcomm::plugin::enable_store_plugins() "
        "first (DistComm::plugin). Built in: etcd://");
  }
  std::shared_ptr<store> s = open(r);
  s->set_timeout(r.timeout);
  claim(*s, r);
  log(log_level::info, "rank " + std::to_string(r.rank) + ": the job's store is " + r.url);
  return s;
}

}  // namespace distcomm
