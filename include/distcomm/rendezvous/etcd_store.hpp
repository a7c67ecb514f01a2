// etcd_store: the job's store in an etcd v3 cluster, for jobs that must survive the loss of the
// store's own host: DISTCOMM_STORE=etcd://[user@]host:port[,host:port...]/prefix. Requests go
// through etcd's JSON gateway over libcurl to whichever member answers.
//
//   - Keys live under `<prefix>/k/`; the job's identity under `<prefix>/job` (a client of another
//     job is refused, naming both), so one cluster serves many jobs, each under its own prefix.
//   - Every key is attached to the job's lease (`<prefix>/lease`), which every client keeps alive:
//     the keys of a job whose ranks are all gone expire with it (lease_ttl after the last), so a
//     rerun under the same prefix starts clean.
//   - Waits watch their key from the revision they read it at (no polling, no event missed);
//     add() and compare_set() are compare-and-swap transactions on the key's revision.
//   - With a user, the client authenticates to etcd with the job's token as the password
//     (DISTCOMM_AUTH_TOKEN / DISTCOMM_AUTH_TOKEN_FILE).
// Values up to store_max_value_bytes need etcd started with --max-request-bytes above 16 MiB
// (its default is 1.5 MiB); a larger value than etcd takes is an invalid_argument_error saying so.
// docs/STORE.md, "etcd_store".
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

struct etcd_address {
  std::vector<std::string> endpoints;  // "host:port" of each member
  std::string prefix;                  // the job's keys' prefix, without a trailing '/'
  std::string user;                    // "": etcd without authentication
  std::string text;                    // as given, for messages
};

// "etcd://[user@]host:port[,host:port...]/prefix" (host a name, an IPv4 address or [IPv6]);
// rendezvous_error naming the text and what is wrong with it.
etcd_address parse_etcd_url(const std::string& url);

class etcd_store final : public store {
 public:
  // How long the job's keys outlive its last client, and how often each client renews them.
  static constexpr std::chrono::seconds lease_ttl{60};
  static constexpr std::chrono::seconds lease_renewal{10};

  // Reaches the cluster within `timeout` (timeout_error naming the members otherwise), joins or
  // makes the job's lease, and checks that `job` is the prefix's job (rendezvous_error when the
  // prefix holds another). `password` is used only with a user.
  etcd_store(etcd_address address, std::chrono::duration<double> timeout, std::string password = {},
             job_identity job = {});
  ~etcd_store() override;

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;

  const etcd_address& address() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace distcomm
