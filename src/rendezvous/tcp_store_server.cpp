// tcp_store_server: one thread, one epoll set over the listener, a wake-up pipe and every
// connection; each round costs what is ready, not what is open (16,384 ranks and more).
//
// Each connection is a small state machine (greeting sent -> hello -> proof -> ready). Requests
// are decoded by store_protocol's bounded decoder; a bad frame earns an error response and the end
// of that connection only. get/wait on missing keys park a waiter (indexed by the keys it still
// needs) and the thread moves on; a write that creates a key completes the waiters that were
// waiting for it, and the epoll timeout is the earliest deadline (a waiter's, at which it gets a
// `timeout` response naming the keys still missing, or a handshake's).
//
// Limits: ranks that finished the handshake, up to max_connections (from the job's world size);
// connections that have not, up to a quota in all and, while connections from more than one
// address are in their handshake, a small quota per source address. Over a quota, the oldest of
// those that has had a second to finish makes room.
// Otherwise the total quota makes the server stop accepting (the rest wait in the kernel's
// accept queue, and no client has to try again) until a handshake ends or the oldest has had its
// second; over the per-address quota, or the limit on ranks, the new connection is refused with
// "too many connections", which clients retry within their deadline. So whoever holds sockets
// open without a handshake cannot keep a job's ranks out, and a job's own ranks, however many
// start at once, pass in the order they connected.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include <openssl/crypto.h>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "store_detail.hpp"
#include "store_protocol.hpp"
#include "store_socket.hpp"

namespace distcomm {

namespace proto = detail::store_protocol;
using detail::io_clock;
using detail::socket_fd;

namespace {

// A client has this long after connecting to finish the handshake; keeps half-open or silent
// connections from holding slots of the connection limit forever.
constexpr std::chrono::seconds handshake_timeout{10};
// Bytes read per recv().
constexpr std::size_t read_chunk = 64 * 1024;
// When accept() fails for lack of descriptors, the listener rests this long instead of spinning.
constexpr std::chrono::milliseconds accept_pause{100};
// Connections that have not finished the handshake: in all, at least this many or the job's world
// size (so a whole job may connect at once: at 16,384 ranks a quota of 4,096 made the kernel's
// accept queue overflow, and 20,000 clients reconnect, 8.3 s against 6.3 s, 2-core VM,
// 2026-11-29), and per source address while more than one address has some (an address alone
// crowds out no one, and the ranks of a job simulated behind one address, as in the scale test,
// are not refused). One that has had this long may be closed to make room for a new one.
constexpr std::size_t min_handshake_quota = 4096;
constexpr std::size_t handshake_quota_per_address = 512;
constexpr std::chrono::seconds handshake_grace{1};
// epoll data of the two descriptors that are not connections (whose ids start above them).
constexpr std::uint64_t wake_id = 0;
constexpr std::uint64_t listener_id = 1;

enum class phase { hello, proof, ready };

struct connection {
  socket_fd fd;
  std::uint64_t id = 0;
  std::string peer;
  std::string address;         // the peer's address without its port: the handshake quota's key
  std::uint32_t interest = 0;  // the epoll events asked for
  phase state = phase::hello;
  proto::nonce server_nonce{};
  proto::nonce client_nonce{};
  io_clock::time_point handshake_deadline;
  bytes in;
  bytes out;
  std::size_t out_pos = 0;
  std::uint64_t waiter = 0;         // parked request, 0 when none
  std::vector<std::string> held;    // keys it holds: removed when it closes
  bool close_when_flushed = false;  // after an error response or a refusal
  bool dead = false;                // to be closed at the end of this round

  bool writing() const noexcept { return out_pos < out.size(); }
};

struct waiter {
  std::uint64_t conn = 0;
  proto::command cmd = proto::command::wait;
  std::vector<std::string> keys;  // as asked, for the timeout response
  std::size_t missing = 0;        // how many distinct keys are still absent
  io_clock::time_point deadline;
};

// "world size 3, this store's job has 2" / "job 'b', this store's job is 'a'".
std::string describe_other_job(const job_identity& client, const job_identity& server) {
  std::string out;
  if (client.world_size > 0 && server.world_size > 0 && client.world_size != server.world_size) {
    out = "world size " + std::to_string(client.world_size) + ", this store's job has " +
          std::to_string(server.world_size);
  }
  if (!client.id.empty() && !server.id.empty() && client.id != server.id) {
    out += (out.empty() ? "" : "; ") + std::string("job ") + detail::quote_key(client.id) +
           ", this store's job is " + detail::quote_key(server.id);
  }
  return out;
}

// Raises this process's soft limit on open descriptors towards `wanted` (at most the hard limit):
// a store of 16,384 ranks holds as many sockets.
void raise_descriptor_limit(std::size_t wanted) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted) return;
  const rlim_t target = std::min<rlim_t>(static_cast<rlim_t>(wanted), lim.rlim_max);
  if (target > lim.rlim_cur) {
    lim.rlim_cur = target;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (target < wanted) {
    log(log_level::warn, "tcp_store server: this process may open " + std::to_string(target) +
                             " descriptors (ulimit -Hn), fewer than the " + std::to_string(wanted) +
                             " its connection limit may need");
  }
}

}  // namespace

struct tcp_store_server::impl {
  std::string host;
  int port = 0;
  std::string token;
  job_identity job;
  std::size_t max_connections = 0;
  std::size_t handshake_quota = min_handshake_quota;
  // A client's host silent this long is lost: its connection closes, and with it its held keys
  // (keep_alive). DISTCOMM_TIMEOUT of the process that serves.
  std::chrono::duration<double> peer_silence{config::from_env().timeout};

  socket_fd listener;
  socket_fd wake_read;
  socket_fd wake_write;
  socket_fd epoll;
  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> open_connections{0};
  std::thread thread;

  // Everything below belongs to the server thread.
  std::unordered_map<std::string, bytes> data;
  std::unordered_map<std::string, std::uint64_t> holders;  // held key -> its connection
  std::unordered_map<std::uint64_t, connection> conns;
  std::uint64_t next_conn = listener_id + 1;
  std::size_t ready_connections = 0;  // past the handshake
  std::map<std::uint64_t, waiter> waiters;
  std::uint64_t next_waiter = 1;
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting_on;
  std::set<std::pair<io_clock::time_point, std::uint64_t>> waiter_deadlines;
  // Connections still in the handshake, by deadline (connection order), in all and per address.
  using handshake_set = std::set<std::pair<io_clock::time_point, std::uint64_t>>;
  handshake_set handshakes;
  std::unordered_map<std::string, handshake_set> handshakes_from;
  std::vector<std::uint64_t> dead;  // marked this round, closed at its end
  io_clock::time_point listener_paused_until{};
  bool listener_watched = true;
  bool paused_for_handshakes = false;  // resumes as soon as a handshake ends

  ~impl() { OPENSSL_cleanse(token.data(), token.size()); }

  void run();
  void accept_all();
  void read_from(connection& c, std::uint64_t id);
  void process_input(connection& c, std::uint64_t id);
  void on_hello(connection& c, const proto::hello& h);
  void on_proof(connection& c);
  void on_request(connection& c, std::uint64_t id, proto::request& r);
  void park(connection& c, std::uint64_t id, proto::command cmd, std::vector<std::string> keys,
            std::uint32_t timeout_ms);
  void key_created(const std::string& key);
  void finish_waiter(std::uint64_t wid, bool timed_out);
  void drop_waiter(std::uint64_t wid);
  void expire(io_clock::time_point now);
  void send(connection& c, const std::uint8_t* data, std::size_t size);
  void send(connection& c, const bytes& b) { send(c, b.data(), b.size()); }
  // Writes what it can of c's answer, then asks epoll for what c waits for next.
  void flush(connection& c);
  void write_out(connection& c);
  void refuse(connection& c, const std::string& why);
  void mark_dead(connection& c);
  void watch(connection& c);
  void watch_listener(bool on);
  void handshake_done(connection& c);
  bool close_oldest_after_grace(const handshake_set& pool);
  void close_dead();
  int poll_timeout_ms(io_clock::time_point now) const;
};

tcp_store_server::tcp_store_server(const std::string& host, int port, std::string token,
                                   std::size_t max_connections)
    : tcp_store_server(host, port, std::move(token), job_identity{}, max_connections) {}

tcp_store_server::tcp_store_server(const std::string& host, int port, std::string token,
                                   job_identity job, std::size_t max_connections)
    : impl_(std::make_unique<impl>()) {
  if (job.id.size() > proto::max_job_id_bytes) {
    throw invalid_argument_error("tcp_store: a job id has at most " +
                                 std::to_string(proto::max_job_id_bytes) + " bytes, not " +
                                 std::to_string(job.id.size()));
  }
  impl_->host = host;
  impl_->token = std::move(token);
  impl_->job = std::move(job);
  if (max_connections == automatic_max_connections) {
    const auto w = static_cast<std::size_t>(std::max(impl_->job.world_size, 0));
    // Two per rank (its requests, and the keys it holds: tcp_store::hold), a quarter more.
    max_connections = w > 0 ? 2 * w + w / 4 + 64 : unknown_job_max_connections;
  }
  impl_->max_connections = max_connections;
  impl_->handshake_quota = std::max<std::size_t>(
      min_handshake_quota, static_cast<std::size_t>(std::max(impl_->job.world_size, 0)));
  raise_descriptor_limit(max_connections + impl_->handshake_quota + 64);
  impl_->listener = detail::listen_on(host, port, impl_->port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw error("tcp_store: cannot create the server's wake-up pipe: " + detail::errno_text(errno));
  }
  impl_->wake_read = socket_fd(pipe_fds[0]);
  impl_->wake_write = socket_fd(pipe_fds[1]);
  impl_->epoll = socket_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!impl_->epoll) {
    throw error("tcp_store: cannot create the server's epoll set: " + detail::errno_text(errno));
  }
  for (const auto& [fd, id] : {std::pair<int, std::uint64_t>{impl_->wake_read.get(), wake_id},
                               {impl_->listener.get(), listener_id}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(impl_->epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      throw error("tcp_store: cannot watch the server's sockets: " + detail::errno_text(errno));
    }
  }
  impl_->thread = std::thread([this] { impl_->run(); });
}

tcp_store_server::~tcp_store_server() {
  impl_->stopping.store(true);
  const char byte = 0;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake_write.get(), &byte, 1);
  impl_->thread.join();
  impl_->open_connections.store(0);
}

int tcp_store_server::port() const noexcept { return impl_->port; }
const std::string& tcp_store_server::host() const noexcept { return impl_->host; }
std::size_t tcp_store_server::connections() const noexcept {
  return impl_->open_connections.load();
}
const job_identity& tcp_store_server::job() const noexcept { return impl_->job; }

void tcp_store_server::impl::run() {
  std::vector<epoll_event> events(1024);
  while (!stopping.load()) {
    const auto now = io_clock::now();
    if (!listener_watched && now >= listener_paused_until) watch_listener(true);
    const int r = ::epoll_wait(epoll.get(), events.data(), static_cast<int>(events.size()),
                               poll_timeout_ms(now));
    if (r < 0 && errno != EINTR) {
      log(log_level::error, "tcp_store server: epoll_wait failed: " + detail::errno_text(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (stopping.load()) break;
    bool accept_now = false;
    for (int i = 0; i < r; ++i) {
      const std::uint64_t id = events[static_cast<std::size_t>(i)].data.u64;
      if (id == wake_id) {
        char buf[64];
        while (::read(wake_read.get(), buf, sizeof buf) > 0) {
        }
        continue;
      }
      if (id == listener_id) {
        accept_now = true;
        continue;
      }
      const auto it = conns.find(id);
      if (it == conns.end() || it->second.dead) continue;
      connection& c = it->second;
      try {
        if (c.writing()) {
          flush(c);
          // Done writing: requests that arrived meanwhile can be served now.
          if (!c.writing() && !c.dead) process_input(c, id);
        } else {
          read_from(c, id);
        }
      } catch (const std::exception& e) {
        // Nothing a client sends may stop the server: the connection pays, no one else.
        log(log_level::warn,
            "tcp_store server: closing the connection from " + c.peer + ": " + e.what());
        mark_dead(c);
      }
    }
    expire(io_clock::now());
    close_dead();
    // After close_dead, so connections that just ended do not count against the limits.
    if (accept_now) accept_all();
    if (r == static_cast<int>(events.size())) events.resize(events.size() * 2);
  }
  conns.clear();
}

int tcp_store_server::impl::poll_timeout_ms(io_clock::time_point now) const {
  // Wakes at least once a second: cheap, and bounds the damage of any missed wake-up.
  io_clock::time_point next = now + std::chrono::seconds(1);
  if (!waiter_deadlines.empty()) next = std::min(next, waiter_deadlines.begin()->first);
  if (!handshakes.empty()) next = std::min(next, handshakes.begin()->first);
  if (!listener_watched) next = std::min(next, listener_paused_until);
  if (next <= now) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
}

void tcp_store_server::impl::watch_listener(bool on) {
  if (on) paused_for_handshakes = false;
  if (on == listener_watched) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = listener_id;
  ::epoll_ctl(epoll.get(), on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, listener.get(), &ev);
  listener_watched = on;
}

// Asks epoll for what the connection waits for: room to write while an answer is out, else input.
void tcp_store_server::impl::watch(connection& c) {
  const std::uint32_t want = c.writing() ? EPOLLOUT : EPOLLIN;
  if (c.interest == want) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  const int op = c.interest == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (::epoll_ctl(epoll.get(), op, c.fd.get(), &ev) != 0) {
    log(log_level::warn, "tcp_store server: closing the connection from " + c.peer +
                             ": cannot watch it: " + detail::errno_text(errno));
    mark_dead(c);
    return;
  }
  c.interest = want;
}

void tcp_store_server::impl::mark_dead(connection& c) {
  if (c.dead) return;
  c.dead = true;
  dead.push_back(c.id);
}

void tcp_store_server::impl::handshake_done(connection& c) {
  handshakes.erase({c.handshake_deadline, c.id});
  if (paused_for_handshakes && handshakes.size() < handshake_quota) watch_listener(true);
  const auto it = handshakes_from.find(c.address);
  if (it != handshakes_from.end()) {
    it->second.erase({c.handshake_deadline, c.id});
    if (it->second.empty()) handshakes_from.erase(it);
  }
}

// Closes the oldest connection of `pool` still in its handshake if it has had its grace: true
// when there is room for a new one then.
bool tcp_store_server::impl::close_oldest_after_grace(const handshake_set& pool) {
  const auto oldest = pool.begin();
  // Deadlines are connection time + handshake_timeout: its age is what passed since then.
  if (oldest == pool.end() ||
      oldest->first - handshake_timeout + handshake_grace > io_clock::now()) {
    return false;
  }
  const auto it = conns.find(oldest->second);
  if (it == conns.end()) return false;
  log(log_level::debug, "tcp_store server: closing the connection from " + it->second.peer +
                            ": no handshake yet, and connections that have not finished theirs "
                            "are at their limit");
  handshake_done(it->second);
  mark_dead(it->second);
  return true;
}

void tcp_store_server::impl::accept_all() {
  for (;;) {
    if (handshakes.size() >= handshake_quota && !close_oldest_after_grace(handshakes)) {
      // Backpressure: the rest wait in the kernel's queue until a handshake ends (handshake_done)
      // or the oldest has had its grace.
      listener_paused_until = handshakes.begin()->first - handshake_timeout + handshake_grace;
      paused_for_handshakes = true;
      watch_listener(false);
      return;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    socket_fd fd(::accept4(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len,
                           SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        log(log_level::warn, "tcp_store server: cannot accept connections: " +
                                 detail::errno_text(errno) + " (raise `ulimit -n`?)");
        listener_paused_until = io_clock::now() + accept_pause;
        watch_listener(false);
      }
      return;  // EAGAIN: no more pending connections
    }
    const std::string peer = detail::peer_name(reinterpret_cast<sockaddr*>(&addr), len);
    const std::string address = peer.substr(0, peer.rfind(':'));
    proto::greeting g;
    g.auth = !token.empty();
    g.job = job;
    const bool full = ready_connections >= max_connections;
    const auto from = handshakes_from.find(address);
    const bool over_address_quota = handshakes_from.size() > 1 && from != handshakes_from.end() &&
                                    from->second.size() >= handshake_quota_per_address &&
                                    !close_oldest_after_grace(from->second);
    if (full || over_address_quota) {
      // The client reads the greeting before it writes anything, so closing right away cannot
      // reset the connection before the refusal arrives. It retries within its deadline.
      g.status = proto::handshake_status::too_many_connections;
      const auto record = proto::encode_greeting(g);
      [[maybe_unused]] const ssize_t n =
          ::send(fd.get(), record.data(), record.size(), MSG_NOSIGNAL);
      log(log_level::debug,
          "tcp_store server: refused a connection from " + peer + ": " +
              (full ? "already serving " + std::to_string(ready_connections) + " ranks (the limit)"
                    : std::string("too many connections without a handshake")));
      continue;
    }
    const std::uint64_t id = next_conn++;
    detail::keep_alive(fd.get(), peer_silence);
    connection& c = conns[id];
    c.fd = std::move(fd);
    c.id = id;
    c.peer = peer;
    c.address = address;
    c.handshake_deadline = io_clock::now() + handshake_timeout;
    handshakes.insert({c.handshake_deadline, id});
    handshakes_from[address].insert({c.handshake_deadline, id});
    c.server_nonce = proto::random_nonce();
    g.server_nonce = c.server_nonce;
    open_connections.store(conns.size());
    send(c, proto::encode_greeting(g));
  }
}

void tcp_store_server::impl::read_from(connection& c, std::uint64_t id) {
  std::uint8_t buf[read_chunk];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      process_input(c, id);
      if (c.dead || c.writing()) return;  // backpressure: read again once the answer is out
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // Orderly close or reset: a client that is done, or one that died. Either way its waiters go.
    mark_dead(c);
    return;
  }
}

void tcp_store_server::impl::process_input(connection& c, std::uint64_t id) {
  while (!c.dead && !c.close_when_flushed && !c.writing()) {
    if (c.state == phase::hello) {
      proto::hello h;
      const auto res = proto::decode_hello(c.in.data(), c.in.size(), h);
      if (res.status == proto::decode_status::incomplete) return;  // at most max_hello_bytes
      if (res.status == proto::decode_status::malformed) {
        log(log_level::warn,
            "tcp_store server: closing the connection from " + c.peer + ": " + res.error);
        mark_dead(c);
        return;
      }
      // A client of another version hears so, whatever it sent after its head.
      if (h.version == proto::protocol_version && c.in.size() > res.consumed) {
        return refuse(c, "it sent more than a hello before the server's proof");
      }
      on_hello(c, h);
      c.in.clear();
    } else if (c.state == phase::proof) {
      if (c.in.size() > proto::client_proof_bytes) {
        return refuse(c, "it sent more than its proof before the verdict");
      }
      if (c.in.size() < proto::client_proof_bytes) return;
      on_proof(c);
      c.in.clear();
    } else {
      if (c.in.empty()) return;
      if (c.waiter) {
        // One request at a time: our client never sends while it waits for an answer.
        return refuse(c, "it sent a request while another was pending");
      }
      proto::request r;
      const auto res = proto::decode_request(c.in.data(), c.in.size(), r);
      if (res.status == proto::decode_status::incomplete) return;
      if (res.status == proto::decode_status::malformed) return refuse(c, res.error);
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(res.consumed));
      on_request(c, id, r);
    }
  }
}

void tcp_store_server::impl::refuse(connection& c, const std::string& why) {
  log(log_level::warn, "tcp_store server: closing the connection from " + c.peer + ": " + why);
  if (c.state == phase::ready) {
    send(c, proto::encode_response(proto::response_status::error,
                                   "the store server closed this connection: " + why));
    c.close_when_flushed = true;
    if (!c.writing()) mark_dead(c);
  } else {
    mark_dead(c);
  }
  c.in.clear();
}

void tcp_store_server::impl::on_hello(connection& c, const proto::hello& h) {
  c.client_nonce = h.client_nonce;
  bytes record(proto::server_proof_bytes, 0);
  const auto answer = [&](proto::handshake_status s, const std::string& why) {
    record[0] = static_cast<std::uint8_t>(s);
    log(log_level::warn, "tcp_store server: refused a client from " + c.peer + ": " + why);
    // Set first: the send may flush at once, and the connection must end once it has.
    c.close_when_flushed = true;
    send(c, record);
  };
  if (h.version != proto::protocol_version) {
    return answer(proto::handshake_status::version_mismatch,
                  "it speaks protocol version " + std::to_string(h.version) + ", this server " +
                      std::to_string(proto::protocol_version));
  }
  // Before the token: a rank of another job is told so, whatever token it holds.
  if (!same_job(job, h.job)) {
    return answer(proto::handshake_status::other_job,
                  "it belongs to another job (" + describe_other_job(h.job, job) + ")");
  }
  if (!token.empty() && !h.auth) {
    return answer(proto::handshake_status::token_required,
                  "it has no token and this server requires one (DISTCOMM_AUTH_TOKEN)");
  }
  if (token.empty() && h.auth) {
    return answer(proto::handshake_status::token_unexpected,
                  "it has a token (DISTCOMM_AUTH_TOKEN) and this server runs without one");
  }
  if (!token.empty()) {
    const auto m = proto::server_mac(token, c.client_nonce, c.server_nonce);
    std::copy(m.begin(), m.end(), record.begin() + 1);
  }
  c.state = phase::proof;
  send(c, record);
}

void tcp_store_server::impl::on_proof(connection& c) {
  proto::mac got{};
  std::copy(c.in.begin(), c.in.begin() + proto::mac_bytes, got.begin());
  std::uint8_t verdict = static_cast<std::uint8_t>(proto::handshake_status::ok);
  if (!token.empty() &&
      !proto::same_mac(got, proto::client_mac(token, c.server_nonce, c.client_nonce))) {
    verdict = static_cast<std::uint8_t>(proto::handshake_status::auth_failed);
    log(log_level::warn, "tcp_store server: refused a client from " + c.peer +
                             ": authentication failed (its token differs from this server's)");
    c.close_when_flushed = true;
  } else {
    c.state = phase::ready;
    handshake_done(c);
    ++ready_connections;
  }
  send(c, &verdict, 1);
}

void tcp_store_server::impl::on_request(connection& c, std::uint64_t id, proto::request& r) {
  using proto::command;
  using proto::response_status;
  const bytes none;
  try {
    switch (r.cmd) {
      case command::set: {
        const bool created = data.find(r.key) == data.end();
        data[r.key] = std::move(r.value);
        send(c, proto::encode_response(response_status::ok, none));
        if (created) key_created(r.key);
        return;
      }
      case command::get: {
        const auto it = data.find(r.key);
        if (it != data.end())
          return send(c, proto::encode_response(response_status::ok, it->second));
        return park(c, id, r.cmd, {r.key}, r.timeout_ms);
      }
      case command::add: {
        const auto it = data.find(r.key);
        const bool created = it == data.end();
        const std::int64_t v =
            detail::add_to_counter("tcp_store", r.key, created ? nullptr : &it->second, r.delta);
        data[r.key] = detail::encode_counter(v);
        bytes payload;
        proto::put_u32(payload, static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32));
        proto::put_u32(payload, static_cast<std::uint32_t>(static_cast<std::uint64_t>(v)));
        send(c, proto::encode_response(response_status::ok, payload));
        if (created) key_created(r.key);
        return;
      }
      case command::check: {
        const bool all = std::all_of(r.keys.begin(), r.keys.end(),
                                     [&](const std::string& k) { return data.count(k) > 0; });
        const bytes payload{static_cast<std::uint8_t>(all ? 1 : 0)};
        return send(c, proto::encode_response(response_status::ok, payload));
      }
      case command::wait: {
        const bool all = std::all_of(r.keys.begin(), r.keys.end(),
                                     [&](const std::string& k) { return data.count(k) > 0; });
        if (all) return send(c, proto::encode_response(response_status::ok, none));
        return park(c, id, r.cmd, std::move(r.keys), r.timeout_ms);
      }
      case command::hold: {
        // The key goes with this connection, whoever writes it meanwhile; the last hold wins.
        const bool created = data.find(r.key) == data.end();
        data[r.key] = std::move(r.value);
        holders[r.key] = c.id;
        c.held.push_back(r.key);
        send(c, proto::encode_response(response_status::ok, none));
        if (created) key_created(r.key);
        return;
      }
      case command::compare_set: {
        const auto it = data.find(r.key);
        const bytes* current = it == data.end() ? nullptr : &it->second;
        if (detail::compare_set_applies(current, r.expected)) {
          data[r.key] = r.value;
          send(c, proto::encode_response(response_status::ok, r.value));
          if (!current) key_created(r.key);
        } else {
          send(c, proto::encode_response(response_status::ok, current ? *current : none));
        }
        return;
      }
    }
  } catch (const invalid_argument_error& e) {
    // A request that cannot work (add on a non-integer): the client's error, the connection stays.
    send(c, proto::encode_response(response_status::invalid, std::string(e.what())));
  }
}

void tcp_store_server::impl::park(connection& c, std::uint64_t id, proto::command cmd,
                                  std::vector<std::string> keys, std::uint32_t timeout_ms) {
  const std::uint64_t wid = next_waiter++;
  waiter w;
  w.conn = id;
  w.cmd = cmd;
  w.deadline = io_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::set<std::string> distinct;
  for (const auto& k : keys) {
    if (!data.count(k) && distinct.insert(k).second) waiting_on[k].push_back(wid);
  }
  w.missing = distinct.size();
  w.keys = std::move(keys);
  waiter_deadlines.insert({w.deadline, wid});
  waiters.emplace(wid, std::move(w));
  c.waiter = wid;
}

void tcp_store_server::impl::key_created(const std::string& key) {
  const auto it = waiting_on.find(key);
  if (it == waiting_on.end()) return;
  const std::vector<std::uint64_t> ids = std::move(it->second);
  waiting_on.erase(it);
  for (const std::uint64_t wid : ids) {
    const auto w = waiters.find(wid);
    if (w != waiters.end() && --w->second.missing == 0) finish_waiter(wid, false);
  }
}

void tcp_store_server::impl::finish_waiter(std::uint64_t wid, bool timed_out) {
  const auto it = waiters.find(wid);
  if (it == waiters.end()) return;
  const waiter w = std::move(it->second);
  drop_waiter(wid);
  const auto ci = conns.find(w.conn);
  if (ci == conns.end() || ci->second.dead) return;
  connection& c = ci->second;
  c.waiter = 0;
  if (timed_out) {
    std::vector<std::string> missing;
    for (const auto& k : w.keys) {
      if (!data.count(k)) missing.push_back(k);
    }
    send(c,
         proto::encode_response(proto::response_status::timeout, proto::encode_key_list(missing)));
  } else if (w.cmd == proto::command::get) {
    send(c, proto::encode_response(proto::response_status::ok, data.at(w.keys.front())));
  } else {
    send(c, proto::encode_response(proto::response_status::ok, bytes{}));
  }
}

void tcp_store_server::impl::drop_waiter(std::uint64_t wid) {
  const auto it = waiters.find(wid);
  if (it == waiters.end()) return;
  for (const auto& k : it->second.keys) {
    const auto list = waiting_on.find(k);
    if (list == waiting_on.end()) continue;
    auto& v = list->second;
    v.erase(std::remove(v.begin(), v.end(), wid), v.end());
    if (v.empty()) waiting_on.erase(list);
  }
  waiter_deadlines.erase({it->second.deadline, wid});
  waiters.erase(it);
}

void tcp_store_server::impl::expire(io_clock::time_point now) {
  while (!waiter_deadlines.empty() && waiter_deadlines.begin()->first <= now) {
    const std::uint64_t wid = waiter_deadlines.begin()->second;
    if (waiters.count(wid) == 0) {
      waiter_deadlines.erase(waiter_deadlines.begin());
      continue;
    }
    finish_waiter(wid, true);  // drops the deadline with the waiter
  }
  while (!handshakes.empty() && handshakes.begin()->first <= now) {
    const auto it = conns.find(handshakes.begin()->second);
    if (it == conns.end()) {
      handshakes.erase(handshakes.begin());
      continue;
    }
    log(log_level::warn, "tcp_store server: closing the connection from " + it->second.peer +
                             ": no handshake within " + std::to_string(handshake_timeout.count()) +
                             " s");
    handshake_done(it->second);
    mark_dead(it->second);
  }
}

void tcp_store_server::impl::send(connection& c, const std::uint8_t* data, std::size_t size) {
  if (c.out_pos == c.out.size()) {
    c.out.clear();
    c.out_pos = 0;
  }
  c.out.insert(c.out.end(), data, data + size);
  flush(c);
}

void tcp_store_server::impl::flush(connection& c) {
  write_out(c);
  if (!c.dead) watch(c);  // output left: wait for room to write; none: for input
}

void tcp_store_server::impl::write_out(connection& c) {
  while (c.writing()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      c.out_pos += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    mark_dead(c);  // the peer is gone
    return;
  }
  c.out.clear();
  c.out_pos = 0;
  if (c.close_when_flushed) mark_dead(c);
}

void tcp_store_server::impl::close_dead() {
  for (const std::uint64_t id : dead) {
    const auto it = conns.find(id);
    if (it == conns.end()) continue;
    connection& c = it->second;
    if (c.waiter) drop_waiter(c.waiter);
    for (const std::string& k : c.held) {
      const auto h = holders.find(k);
      if (h == holders.end() || h->second != c.id) continue;  // held by another since
      holders.erase(h);
      data.erase(k);
      log(log_level::debug, "tcp_store server: " + c.peer + " closed; the key " +
                                detail::quote_key(k) + " it held is gone");
    }
    if (c.state == phase::ready) {
      --ready_connections;
    } else {
      handshake_done(c);
    }
    conns.erase(it);  // closes the socket, which leaves the epoll set
  }
  dead.clear();
  open_connections.store(conns.size());
}

}  // namespace distcomm
