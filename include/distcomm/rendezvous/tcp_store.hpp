// tcp_store: the key-value store over TCP for jobs that span machines. One process hosts a
// tcp_store_server (rank 0 by default, see make_tcp_store); every rank talks to it through a
// tcp_store client. With a token (DISTCOMM_AUTH_TOKEN / DISTCOMM_AUTH_TOKEN_FILE) every connection
// starts with a mutual HMAC-SHA256 challenge-response and the token never crosses the wire.
// Protocol, limits and threat model: docs/STORE.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {

// The job a store belongs to, as the client and the server each say it in the handshake: a
// server refuses at once a client that names another job (a rank of a second job started on the
// same port), and the client's rendezvous_error names the port and the clash. A part that is
// not said (world size 0, empty id) agrees with anything: a server or client built without an
// identity (a store run by someone else, DISTCOMM_STORE_ADDR) serves or joins any job.
struct job_identity {
  int world_size = 0;  // the job's number of ranks; 0: not said
  std::string id;      // what the launcher calls the job (at most 255 bytes); "": not said
};
// False when a and b say different world sizes or different ids.
bool same_job(const job_identity& a, const job_identity& b) noexcept;

// The server: listens on host:port and serves on a thread of its own (epoll over every
// connection; waits are parked and answered when their keys arrive, never blocking the thread).
// A malformed, truncated or oversized message closes that connection only. Stops in the destructor.
class tcp_store_server {
 public:
  // The limit on connections that finished the handshake, past which a new one is refused (the
  // client retries within its deadline). Automatic: twice the job's world size (a rank's
  // requests, and the keys it holds on a connection of their own) + a quarter + 64, or
  // unknown_job_max_connections for a server that does not know its job. Connections still in
  // the handshake have a quota of their own, in all (at which the server stops accepting for a
  // moment) and per source address (tcp_store_server.cpp).
  static constexpr std::size_t automatic_max_connections = 0;
  static constexpr std::size_t unknown_job_max_connections = 32768;
  static constexpr std::size_t default_max_connections = automatic_max_connections;

  // host: a numeric address to listen on ("127.0.0.1", "::1"), "" or "0.0.0.0" / "::" for every
  // interface, or a name (resolved, first address that binds). port 0 picks a free port.
  // token: empty for no authentication. rendezvous_error naming address and port when it cannot
  // listen ("tcp_store: cannot listen on 127.0.0.1:29500: Address already in use: another
  // process (another job's store?) already uses port 29500; choose another MASTER_PORT ...").
  tcp_store_server(const std::string& host, int port, std::string token = {},
                   std::size_t max_connections = default_max_connections);
  // A server of one job: clients that name another job are refused in the handshake.
  tcp_store_server(const std::string& host, int port, std::string token, job_identity job,
                   std::size_t max_connections = default_max_connections);
  ~tcp_store_server();
  tcp_store_server(const tcp_store_server&) = delete;
  tcp_store_server& operator=(const tcp_store_server&) = delete;

  // The port it listens on (the one picked, when constructed with 0).
  int port() const noexcept;
  const std::string& host() const noexcept;
  // Connections open now (for tests and diagnostics).
  std::size_t connections() const noexcept;
  const job_identity& job() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The client. Connects in the constructor, retrying with exponential backoff until the timeout
// passes (the server may start after its clients, be full, or not greet a connection its accept
// queue dropped); every call has a deadline (the store's
// timeout) and never blocks without one. Calls from several threads are serialised; give each
// thread its own client when they wait concurrently. After a lost connection or an expired
// deadline the next call reconnects. While it cannot connect it logs at warn level every few
// seconds what it last got and how long it goes on trying.
//
// `job` is what this client says of its job in the handshake; a server of another job refuses
// it at once (rendezvous_error "the store at H:P belongs to another job (...)").
class tcp_store final : public store {
 public:
  tcp_store(std::string host, int port,
            std::chrono::duration<double> timeout = std::chrono::duration<double>(300.0),
            std::string token = {}, job_identity job = {});
  // A client that owns `server` (kept alive as long as this client) and connects to it, saying
  // the server's job.
  tcp_store(std::unique_ptr<tcp_store_server> server, std::string host,
            std::chrono::duration<double> timeout, std::string token);
  // Destroying a client that hosts the server keeps serving the other ranks until they have
  // disconnected, for at most min(timeout(), 30 s), so a rank still reading its last keys does
  // not see the store vanish; for at most 0.25 s once mark_job_failed() was called, or while an
  // exception unwinds the stack (the job has failed, and a stopped or hung rank never
  // disconnects).
  ~tcp_store() override;

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;
  bool hold(const std::string& key, const bytes& value) override;
  void mark_job_failed() noexcept override;

  const std::string& host() const noexcept;
  int port() const noexcept;
  // The server this client hosts, or nullptr.
  const tcp_store_server* server() const noexcept { return server_.get(); }

 private:
  struct impl;
  std::unique_ptr<tcp_store_server> server_;  // declared first: outlives the connection
  std::unique_ptr<impl> impl_;
};

// The store of a job. With is_server (rank 0 when DISTCOMM_STORE_ADDR is not set) this process
// hosts the server at host:port, listening on that address when host is numeric and on every
// interface when it is a name (a host name may resolve to a loopback alias on its own machine),
// and returns a client connected to it; otherwise it returns a client of host:port.
//
// DISTCOMM_STORE_ADDR=host:port names a server run by someone else (a launcher, or a process
// that built a tcp_store_server): then every rank passes is_server = false and that address,
// and MASTER_ADDR/MASTER_PORT are left to the backends. store_addr_from_env() reads it.
//
// `job` is this rank's job: the server's identity when it hosts, what it says as a client. A port
// that is taken is a rendezvous_error naming it and saying to choose another MASTER_PORT.
std::unique_ptr<store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::duration<double> timeout,
                                      const std::string& token = {}, const job_identity& job = {});

struct store_address {
  std::string host;
  int port = 0;
};
// DISTCOMM_STORE_ADDR as host:port ("10.0.0.1:29500", "node01:29500", "[::1]:29500"), nullopt
// when unset or empty; rendezvous_error naming the value when it is malformed.
std::optional<store_address> store_addr_from_env(const env_lookup& getenv);

// The token for store authentication: DISTCOMM_AUTH_TOKEN, else the contents of the file named
// by DISTCOMM_AUTH_TOKEN_FILE (trailing newlines stripped), else "" (no authentication).
// rendezvous_error when both are set, when either is set but empty, or when the file cannot be
// read. Warns (log) when the file is readable by group or others, or the token is short.
std::string auth_token_from_env(const env_lookup& getenv);
std::string auth_token_from_env();
// `bytes` random bytes from OpenSSL as hex text (twice as many characters): a fresh token, or a
// job's name. error when OpenSSL has no entropy source.
std::string random_token(std::size_t bytes = 32);

}  // namespace distcomm
