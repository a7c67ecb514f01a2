// A DistComm backend plugin over plain TCP sockets, written only against the installed C header
// <distcomm/distcomm_backend_v1.h> (no other DistComm header or library): what a vendor writes to
// add a transport. Built as libdistcomm_backend_tcp.so by this folder's CMakeLists.txt; chosen
// with DISTCOMM_BACKEND=tcp and DISTCOMM_PLUGIN_PATH=<the folder holding it>.
//
// One connection per pair of ranks. Each rank listens on an ephemeral port of 127.0.0.1 (or of
// the address DISTCOMM_PLUGIN_OPTIONS=bind=<address> names), publishes "address:port" in the
// job's store, connects to every lower rank and accepts every higher one. A message is a header
// (kind, tag, bytes) and its payload. There is no progress thread: sockets are read and written
// inside test(), wait() and the calls that post, so a rank progresses while it waits.
// Matching: per peer and tag, receives and arrived messages pair up in order; a message that
// arrives before its receive is kept (unexpected); a receive whose size differs fails with
// DISTCOMM_V1_MISMATCH and its message is consumed whole. No native collectives: DistComm runs
// its point-to-point strategies over this plugin.
#include <arpa/inet.h>
#include <distcomm/distcomm_backend_traits_v1.h>
#include <distcomm/distcomm_backend_v1.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t after_seconds(double s) {
  const double ns = s * 1e9;
  return ns >= 9e18 ? DISTCOMM_V1_NO_DEADLINE : now_ns() + static_cast<std::int64_t>(ns);
}

// Fills err and returns status.
int fail(distcomm_error_v1* err, int status, const char* format, ...) {
  if (err != nullptr) {
    va_list ap;
    va_start(ap, format);
    std::vsnprintf(err->text, sizeof err->text, format, ap);
    va_end(ap);
  }
  return status;
}

struct header {
  std::uint32_t kind;  // data or abort
  std::uint32_t tag;
  std::uint64_t bytes;
};
constexpr std::uint32_t kind_data = 0;
constexpr std::uint32_t kind_abort = 1;
constexpr std::uint32_t hello_magic = 0x74637031;  // "tcp1"

struct message;

struct request {
  bool is_send = false;
  bool internal = false;  // the rest of a cancelled send, owned by the plugin
  int peer = 0;
  std::uint32_t tag = 0;
  std::size_t bytes = 0;
  char* data = nullptr;
  std::vector<char> owned;  // internal sends: the bytes still to go
  header hdr{};
  std::size_t sent = 0;  // of sizeof(header) + bytes
  int status = DISTCOMM_V1_PENDING;
  std::string error;
  std::shared_ptr<message> bound;  // a receive matched to an unexpected message still arriving
};

// A message that arrived (or is arriving) before its receive was posted.
struct message {
  std::vector<char> payload;
  bool complete = false;
  request* bound = nullptr;
};

struct peer_link {
  int fd = -1;
  bool lost = false;
  std::string why_lost;
  std::deque<request*> sends;
  std::map<std::uint32_t, std::deque<request*>> posted;
  std::map<std::uint32_t, std::deque<std::shared_ptr<message>>> unexpected;
  // The message being read: its header, then its payload into one of the targets below.
  header in{};
  std::size_t in_header = 0;
  bool in_payload = false;
  std::size_t in_got = 0;
  request* in_request = nullptr;        // read straight into a receive's buffer
  std::shared_ptr<message> in_message;  // an unexpected message (or an abort's reason)
  std::vector<char> discard;            // a mismatched or cancelled receive's bytes
};

struct context {
  int rank = 0;
  int size = 1;
  std::vector<peer_link> peers;
  bool failed = false;  // this rank aborted, or a peer's abort arrived: every request fails
  std::string why_failed;
  void (*log)(void*, int, const char*) = nullptr;
  void* log_user = nullptr;
};

context& of(void* ctx) { return *static_cast<context*>(ctx); }
request* req_of(distcomm_request_v1* r) { return reinterpret_cast<request*>(r); }
distcomm_request_v1* handle_of(request* r) { return reinterpret_cast<distcomm_request_v1*>(r); }

std::string describe(const context& c, const request& r) {
  char text[160];
  std::snprintf(text, sizeof text, "tcp: rank %d: %s of %zu bytes %s rank %d (tag %u)", c.rank,
                r.is_send ? "send" : "receive", r.bytes, r.is_send ? "to" : "from", r.peer, r.tag);
  return text;
}

void finish(request* r, int status, std::string error = {}) {
  if (r->status != DISTCOMM_V1_PENDING) return;
  r->status = status;
  r->error = std::move(error);
  r->bound.reset();
}

// ---- matching -------------------------------------------------------------------------------

// A receive meets its message: same size, or a mismatch that consumes the message.
bool sizes_match(context& c, request* r, std::uint64_t bytes) {
  if (bytes == r->bytes) return true;
  char text[128];
  std::snprintf(text, sizeof text, ": the matching message has %llu bytes (no truncation)",
                static_cast<unsigned long long>(bytes));
  finish(r, DISTCOMM_V1_MISMATCH, describe(c, *r) + text);
  return false;
}

void deliver(context& c, request* r, const std::shared_ptr<message>& m) {
  if (!sizes_match(c, r, m->payload.size())) return;
  if (!m->payload.empty()) std::memcpy(r->data, m->payload.data(), m->payload.size());
  finish(r, DISTCOMM_V1_OK);
}

// Fails every pending request on `p` (its connection is gone).
void lose(context& c, int peer, const std::string& why) {
  peer_link& p = c.peers[static_cast<std::size_t>(peer)];
  if (p.lost) return;
  p.lost = true;
  p.why_lost = why;
  for (request* r : p.sends) {
    if (r->internal) {
      delete r;
    } else {
      finish(r, DISTCOMM_V1_PEER_LOST, describe(c, *r) + ": " + why);
    }
  }
  p.sends.clear();
  for (auto& [tag, q] : p.posted) {
    for (request* r : q) finish(r, DISTCOMM_V1_PEER_LOST, describe(c, *r) + ": " + why);
  }
  p.posted.clear();
  if (p.in_request != nullptr) {
    finish(p.in_request, DISTCOMM_V1_PEER_LOST, describe(c, *p.in_request) + ": " + why);
  }
  p.in_request = nullptr;
  if (p.in_message && p.in_message->bound != nullptr) {
    finish(p.in_message->bound, DISTCOMM_V1_PEER_LOST,
           describe(c, *p.in_message->bound) + ": " + why);
  }
  p.in_message.reset();
}

void fail_all(context& c, const std::string& why) {
  if (c.failed) return;
  c.failed = true;
  c.why_failed = why;
  for (int q = 0; q < c.size; ++q) {
    if (q != c.rank) lose(c, q, why);
  }
}

// ---- reading and writing --------------------------------------------------------------------

// Where the payload of the header just read goes.
void route_incoming(context& c, int from) {
  peer_link& p = c.peers[static_cast<std::size_t>(from)];
  p.in_payload = true;
  p.in_got = 0;
  p.in_request = nullptr;
  p.in_message.reset();
  p.discard.clear();
  if (p.in.kind == kind_abort) {
    p.in_message = std::make_shared<message>();
    p.in_message->payload.resize(p.in.bytes);
    return;
  }
  auto& posted = p.posted[p.in.tag];
  if (!posted.empty()) {
    request* r = posted.front();
    posted.pop_front();
    if (sizes_match(c, r, p.in.bytes)) {
      p.in_request = r;
    } else {
      p.discard.resize(p.in.bytes);
    }
    return;
  }
  p.in_message = std::make_shared<message>();
  p.in_message->payload.resize(p.in.bytes);
  p.unexpected[p.in.tag].push_back(p.in_message);
}

char* payload_target(peer_link& p) {
  if (p.in_request != nullptr) return p.in_request->data;
  if (p.in_message) return p.in_message->payload.data();
  return p.discard.data();
}

void payload_complete(context& c, int from) {
  peer_link& p = c.peers[static_cast<std::size_t>(from)];
  p.in_payload = false;
  p.in_header = 0;
  if (p.in.kind == kind_abort) {
    const std::string reason(p.in_message->payload.begin(), p.in_message->payload.end());
    p.in_message.reset();
    char text[64];
    std::snprintf(text, sizeof text, "tcp: rank %d aborted: ", from);
    fail_all(c, text + reason);
    return;
  }
  if (p.in_request != nullptr) finish(p.in_request, DISTCOMM_V1_OK);
  p.in_request = nullptr;
  if (p.in_message) {
    p.in_message->complete = true;
    // A receive took it while it arrived (it left the unexpected queue then).
    if (request* r = p.in_message->bound) deliver(c, r, p.in_message);
  }
  p.in_message.reset();
}

void read_from(context& c, int from) {
  peer_link& p = c.peers[static_cast<std::size_t>(from)];
  while (!p.lost) {
    if (!p.in_payload) {
      auto* h = reinterpret_cast<char*>(&p.in);
      const ssize_t n = ::recv(p.fd, h + p.in_header, sizeof(header) - p.in_header, 0);
      if (n == 0) return lose(c, from, "its connection closed (rank exited, killed or crashed)");
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        return lose(c, from, std::string("connection failed: ") + std::strerror(errno));
      }
      p.in_header += static_cast<std::size_t>(n);
      if (p.in_header < sizeof(header)) continue;
      route_incoming(c, from);
      if (p.in.bytes == 0) payload_complete(c, from);
      continue;
    }
    const std::size_t left = p.in.bytes - p.in_got;
    const ssize_t n = ::recv(p.fd, payload_target(p) + p.in_got, left, 0);
    if (n == 0) return lose(c, from, "its connection closed (rank exited, killed or crashed)");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return lose(c, from, std::string("connection failed: ") + std::strerror(errno));
    }
    p.in_got += static_cast<std::size_t>(n);
    if (p.in_got == p.in.bytes) payload_complete(c, from);
  }
}

void write_to(context& c, int to) {
  peer_link& p = c.peers[static_cast<std::size_t>(to)];
  while (!p.lost && !p.sends.empty()) {
    request* r = p.sends.front();
    iovec iov[2];
    int n_iov = 0;
    const char* payload = r->internal ? r->owned.data() : r->data;
    if (r->sent < sizeof(header)) {
      iov[n_iov++] = {reinterpret_cast<char*>(&r->hdr) + r->sent, sizeof(header) - r->sent};
      if (r->bytes != 0) iov[n_iov++] = {const_cast<char*>(payload), r->bytes};
    } else {
      const std::size_t off = r->sent - sizeof(header);
      iov[n_iov++] = {const_cast<char*>(payload) + off, r->bytes - off};
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<std::size_t>(n_iov);
    const ssize_t n = ::sendmsg(p.fd, &m, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      return lose(c, to, std::string("connection failed: ") + std::strerror(errno));
    }
    r->sent += static_cast<std::size_t>(n);
    if (r->sent < sizeof(header) + r->bytes) return;  // the socket is full
    p.sends.pop_front();
    if (r->internal) {
      delete r;
    } else {
      finish(r, DISTCOMM_V1_OK);
    }
  }
}

// Reads and writes whatever the sockets take now; with timeout_ms > 0, first waits that long at
// most for one of them to be ready.
void progress(context& c, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> ranks;
  for (int q = 0; q < c.size; ++q) {
    const peer_link& p = c.peers[static_cast<std::size_t>(q)];
    if (q == c.rank || p.lost || p.fd < 0) continue;
    fds.push_back({p.fd, static_cast<short>(POLLIN | (p.sends.empty() ? 0 : POLLOUT)), 0});
    ranks.push_back(q);
  }
  if (fds.empty()) return;
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    write_to(c, ranks[i]);
    read_from(c, ranks[i]);
  }
}

int result_of(const request* r, distcomm_error_v1* err) {
  if (r->status == DISTCOMM_V1_OK || r->status == DISTCOMM_V1_PENDING) return r->status;
  return fail(err, r->status, "%s", r->error.c_str());
}

// ---- set-up ---------------------------------------------------------------------------------

int set_nonblocking(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Waits for fd to be ready for `events` until `deadline`; false on timeout.
bool ready(int fd, short events, std::int64_t deadline) {
  for (;;) {
    const std::int64_t left = deadline - now_ns();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left / 1000000 + 1, 1000)));
    if (n > 0) return true;
  }
}

bool read_all(int fd, void* data, std::size_t bytes, std::int64_t deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    if (!ready(fd, POLLIN, deadline)) return false;
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

struct store_view {
  const distcomm_store_v1* s;

  int get(const std::string& key, std::int64_t deadline, std::string* value,
          distcomm_error_v1* err) const {
    std::vector<char> buf(64);
    for (;;) {
      std::size_t size = 0;
      const int st = s->get(s->user, key.c_str(), deadline, buf.data(), buf.size(), &size, err);
      if (st != DISTCOMM_V1_OK) return st;
      if (size <= buf.size()) {
        value->assign(buf.data(), size);
        return DISTCOMM_V1_OK;
      }
      buf.resize(size);
    }
  }
};

int connect_to(const std::string& address, int my_rank, std::int64_t deadline, int* out,
               distcomm_error_v1* err) {
  const auto colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::atoi(address.c_str() + colon + 1)));
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
    return fail(err, DISTCOMM_V1_RENDEZVOUS, "tcp: '%s' in the store is not an address:port",
                address.c_str());
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  set_nonblocking(fd);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    ::close(fd);
    return fail(err, DISTCOMM_V1_RENDEZVOUS, "tcp: connecting to %s failed: %s", address.c_str(),
                std::strerror(e));
  }
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (!ready(fd, POLLOUT, deadline) ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
    ::close(fd);
    return fail(err, DISTCOMM_V1_RENDEZVOUS, "tcp: connecting to %s failed: %s", address.c_str(),
                so_error != 0 ? std::strerror(so_error) : "timed out");
  }
  const std::uint32_t hello[2] = {hello_magic, static_cast<std::uint32_t>(my_rank)};
  if (::send(fd, hello, sizeof hello, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof hello)) {
    ::close(fd);
    return fail(err, DISTCOMM_V1_RENDEZVOUS, "tcp: greeting %s failed", address.c_str());
  }
  *out = fd;
  return DISTCOMM_V1_OK;
}

void close_all(context& c) {
  for (peer_link& p : c.peers) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
}

int tcp_init(void** out, const distcomm_init_args_v1* args, distcomm_error_v1* err) {
  if (args == nullptr || args->struct_size < sizeof(distcomm_init_args_v1)) {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT, "tcp: init arguments missing or too old");
  }
  if (args->size < 1 || args->rank < 0 || args->rank >= args->size) {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT,
                "tcp: rank %d of %d is not a rank of a world (the launcher must say both)",
                args->rank, args->size);
  }
  auto c = std::unique_ptr<context>(new (std::nothrow) context);
  if (!c) return fail(err, DISTCOMM_V1_BACKEND_ERROR, "tcp: out of memory");
  c->rank = args->rank;
  c->size = args->size;
  c->log = args->log;
  c->log_user = args->log_user;
  c->peers.resize(static_cast<std::size_t>(c->size));
  if (c->size == 1) {
    *out = c.release();
    return DISTCOMM_V1_OK;
  }
  if (args->store == nullptr) {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT,
                "tcp: a world of %d ranks needs the job's store to find the peers", c->size);
  }
  std::string bind_address = "127.0.0.1";
  if (args->options != nullptr && std::strncmp(args->options, "bind=", 5) == 0) {
    bind_address = args->options + 5;
  } else if (args->options != nullptr && *args->options != '\0') {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT,
                "tcp: DISTCOMM_PLUGIN_OPTIONS='%s' is not an option of this plugin (bind=<IPv4 "
                "address>)",
                args->options);
  }
  const std::int64_t deadline = after_seconds(args->timeout_s);
  const store_view kv{args->store};

  // The n-th backend of every rank shares one prefix: ranks make their backends in one order.
  std::int64_t n = 0;
  const std::string count_key = "distcomm-tcp/count/" + std::to_string(c->rank);
  if (const int st = kv.s->add(kv.s->user, count_key.c_str(), 1, &n, err); st != DISTCOMM_V1_OK) {
    return st;
  }
  const std::string prefix = "distcomm-tcp/" + std::to_string(n) + "/addr/";

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  socklen_t len = sizeof sa;
  if (::inet_pton(AF_INET, bind_address.c_str(), &sa.sin_addr) != 1 ||
      ::bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(listener, c->size) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int e = errno;
    ::close(listener);
    return fail(err, DISTCOMM_V1_BACKEND_ERROR, "tcp: cannot listen on %s: %s",
                bind_address.c_str(), std::strerror(e));
  }
  const std::string mine = bind_address + ":" + std::to_string(ntohs(sa.sin_port));
  int st = kv.s->set(kv.s->user, (prefix + std::to_string(c->rank)).c_str(), mine.data(),
                     mine.size(), err);
  // Lower ranks are connected to (their listeners queue the connection until they accept)...
  for (int q = 0; st == DISTCOMM_V1_OK && q < c->rank; ++q) {
    std::string theirs;
    st = kv.get(prefix + std::to_string(q), deadline, &theirs, err);
    if (st == DISTCOMM_V1_OK) st = connect_to(theirs, c->rank, deadline, &c->peers[q].fd, err);
  }
  // ...higher ones are accepted, each saying which rank it is.
  for (int left = c->size - 1 - c->rank; st == DISTCOMM_V1_OK && left > 0; --left) {
    if (!ready(listener, POLLIN, deadline)) {
      st = fail(err, DISTCOMM_V1_TIMEOUT,
                "tcp: rank %d: %d higher rank(s) did not connect within %g s (DISTCOMM_TIMEOUT); "
                "are they running?",
                c->rank, left, args->timeout_s);
      break;
    }
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    std::uint32_t hello[2] = {0, 0};
    if (fd < 0 || !read_all(fd, hello, sizeof hello, deadline) || hello[0] != hello_magic ||
        hello[1] <= static_cast<std::uint32_t>(c->rank) ||
        hello[1] >= static_cast<std::uint32_t>(c->size) || c->peers[hello[1]].fd >= 0) {
      if (fd >= 0) ::close(fd);
      st = fail(err, DISTCOMM_V1_RENDEZVOUS,
                "tcp: rank %d: a connection to its port did not greet as a higher rank of this "
                "job",
                c->rank);
      break;
    }
    c->peers[hello[1]].fd = fd;
  }
  ::close(listener);
  if (st != DISTCOMM_V1_OK) {
    close_all(*c);
    return st;
  }
  for (peer_link& p : c->peers) {
    if (p.fd >= 0) set_nonblocking(p.fd);
  }
  if (c->log != nullptr) {
    const std::string line = "tcp: rank " + std::to_string(c->rank) + " of " +
                             std::to_string(c->size) + " listening on " + mine + ", connected";
    c->log(c->log_user, DISTCOMM_V1_LOG_DEBUG, line.c_str());
  }
  *out = c.release();
  return DISTCOMM_V1_OK;
}

// Flushes what is still queued, says goodbye (shutdown) and reads until the peers said theirs,
// 1 s at most: closing a socket with unread bytes would reset the connection, and the peer could
// lose what it has not read yet.
void tcp_finalize(void* ctx) {
  context& c = of(ctx);
  const std::int64_t until = now_ns() + 1000000000;
  for (int q = 0; q < c.size; ++q) {
    peer_link& p = c.peers[static_cast<std::size_t>(q)];
    while (!p.lost && !p.sends.empty() && now_ns() < until) {
      write_to(c, q);
      if (!p.sends.empty()) ready(p.fd, POLLOUT, std::min(until, now_ns() + 10000000));
    }
    for (request* r : p.sends) {
      if (r->internal) delete r;
    }
    p.sends.clear();
    if (p.fd >= 0) ::shutdown(p.fd, SHUT_WR);
  }
  char sink[4096];
  for (peer_link& p : c.peers) {
    while (p.fd >= 0 && !p.lost && ready(p.fd, POLLIN, until)) {
      const ssize_t n = ::recv(p.fd, sink, sizeof sink, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
  }
  close_all(c);
  delete &c;
}

int tcp_rank(void* ctx) { return of(ctx).rank; }
int tcp_size(void* ctx) { return of(ctx).size; }

int check_call(context& c, int peer, const void* data, std::size_t bytes, distcomm_error_v1* err) {
  if (peer < 0 || peer >= c.size) {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT, "tcp: rank %d is not in a world of %d", peer,
                c.size);
  }
  if (data == nullptr && bytes != 0) {
    return fail(err, DISTCOMM_V1_INVALID_ARGUMENT, "tcp: null buffer of %zu bytes", bytes);
  }
  if (c.failed) return fail(err, DISTCOMM_V1_PEER_LOST, "%s", c.why_failed.c_str());
  return DISTCOMM_V1_OK;
}

// A send to this rank itself: delivered at once, through the same matching.
void send_to_self(context& c, request* r) {
  peer_link& p = c.peers[static_cast<std::size_t>(c.rank)];
  auto& posted = p.posted[r->tag];
  if (!posted.empty()) {
    request* into = posted.front();
    posted.pop_front();
    if (sizes_match(c, into, r->bytes)) {
      if (r->bytes != 0) std::memcpy(into->data, r->data, r->bytes);
      finish(into, DISTCOMM_V1_OK);
    }
  } else {
    auto m = std::make_shared<message>();
    m->payload.assign(r->data, r->data + r->bytes);
    m->complete = true;
    p.unexpected[r->tag].push_back(m);
  }
  finish(r, DISTCOMM_V1_OK);
}

int tcp_isend(void* ctx, const void* data, std::size_t bytes, int peer, std::uint32_t tag,
              distcomm_request_v1** out, distcomm_error_v1* err) {
  context& c = of(ctx);
  if (const int st = check_call(c, peer, data, bytes, err); st != DISTCOMM_V1_OK) return st;
  peer_link& p = c.peers[static_cast<std::size_t>(peer)];
  if (p.lost) {
    return fail(err, DISTCOMM_V1_PEER_LOST, "tcp: rank %d: send to rank %d: %s", c.rank, peer,
                p.why_lost.c_str());
  }
  auto* r = new request;
  r->is_send = true;
  r->peer = peer;
  r->tag = tag;
  r->bytes = bytes;
  r->data = const_cast<char*>(static_cast<const char*>(data));
  r->hdr = {kind_data, tag, bytes};
  if (peer == c.rank) {
    send_to_self(c, r);
  } else {
    p.sends.push_back(r);
    write_to(c, peer);  // small messages leave at once
  }
  *out = handle_of(r);
  return DISTCOMM_V1_OK;
}

int tcp_irecv(void* ctx, void* data, std::size_t bytes, int peer, std::uint32_t tag,
              distcomm_request_v1** out, distcomm_error_v1* err) {
  context& c = of(ctx);
  if (const int st = check_call(c, peer, data, bytes, err); st != DISTCOMM_V1_OK) return st;
  peer_link& p = c.peers[static_cast<std::size_t>(peer)];
  auto* r = new request;
  r->peer = peer;
  r->tag = tag;
  r->bytes = bytes;
  r->data = static_cast<char*>(data);
  auto& early = p.unexpected[tag];
  if (!early.empty()) {  // the oldest message on this tag that no receive took yet
    std::shared_ptr<message> m = early.front();
    early.pop_front();
    if (m->complete) {
      deliver(c, r, m);
    } else {  // still arriving: delivered when its last byte is read
      m->bound = r;
      r->bound = m;
    }
  } else if (p.lost) {
    finish(r, DISTCOMM_V1_PEER_LOST, describe(c, *r) + ": " + p.why_lost);
  } else {
    p.posted[tag].push_back(r);
  }
  *out = handle_of(r);
  return DISTCOMM_V1_OK;
}

int tcp_test(void* ctx, distcomm_request_v1* req, distcomm_error_v1* err) {
  context& c = of(ctx);
  if (req_of(req)->status == DISTCOMM_V1_PENDING) progress(c, 0);
  return result_of(req_of(req), err);
}

int tcp_wait(void* ctx, distcomm_request_v1* req, std::int64_t deadline, distcomm_error_v1* err) {
  context& c = of(ctx);
  request* r = req_of(req);
  while (r->status == DISTCOMM_V1_PENDING) {
    const std::int64_t left = deadline - now_ns();
    if (left <= 0) {
      return fail(err, DISTCOMM_V1_TIMEOUT, "%s: not complete before the deadline",
                  describe(c, *r).c_str());
    }
    // Sleep in the kernel until a socket is ready, at most 100 ms at a time.
    progress(c, static_cast<int>(std::min<std::int64_t>(left / 1000000 + 1, 100)));
  }
  return result_of(r, err);
}

// Once this returns, `r`'s buffer is never touched again.
void tcp_cancel(void* ctx, distcomm_request_v1* req) {
  context& c = of(ctx);
  request* r = req_of(req);
  if (r->status != DISTCOMM_V1_PENDING) return;
  peer_link& p = c.peers[static_cast<std::size_t>(r->peer)];
  if (r->is_send) {
    auto it = std::find(p.sends.begin(), p.sends.end(), r);
    if (it != p.sends.end()) {
      if (r->sent == 0) {
        p.sends.erase(it);  // nothing of it left yet: it never happened
      } else {
        // Partly on the wire: the rest must follow (the stream would break otherwise), from a
        // copy the plugin owns.
        auto* rest = new request(*r);
        rest->internal = true;
        rest->owned.assign(r->data, r->data + r->bytes);
        rest->data = nullptr;
        *it = rest;
      }
    }
  } else if (r->bound) {
    r->bound->bound = nullptr;  // its message was taken: dropped when it completes
  } else if (p.in_request == r) {
    p.in_request = nullptr;  // the rest of its payload is read and dropped
    p.discard.resize(p.in.bytes);
  } else {
    auto& q = p.posted[r->tag];
    q.erase(std::remove(q.begin(), q.end(), r), q.end());  // retracted
  }
  finish(r, DISTCOMM_V1_INVALID_ARGUMENT, describe(c, *r) + ": cancelled");
}

void tcp_free(void* ctx, distcomm_request_v1* req) {
  tcp_cancel(ctx, req);
  delete req_of(req);
}

void tcp_abort(void* ctx, const char* reason) {
  context& c = of(ctx);
  const std::string why = std::string("tcp: rank ") + std::to_string(c.rank) +
                          " aborted: " + (reason != nullptr ? reason : "");
  const bool first = !c.failed;
  fail_all(c, why);
  if (!first) return;
  // Tell every peer, 100 ms at most, so that its waits on this rank fail at once.
  const std::string text = reason != nullptr ? std::string(reason).substr(0, 1000) : "";
  const header h{kind_abort, 0, text.size()};
  const std::int64_t until = now_ns() + 100000000;
  for (peer_link& p : c.peers) {
    if (p.fd < 0) continue;
    std::string wire(reinterpret_cast<const char*>(&h), sizeof h);
    wire += text;
    std::size_t sent = 0;
    while (sent < wire.size() && ready(p.fd, POLLOUT, until)) {
      const ssize_t n = ::send(p.fd, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    ::shutdown(p.fd, SHUT_RDWR);
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const distcomm_backend_v1*
distcomm_backend_plugin_v1(void) {
  static const distcomm_backend_v1 table = [] {
    distcomm_backend_v1 t{};
    t.version = DISTCOMM_BACKEND_V1_VERSION;
    t.struct_size = sizeof t;
    t.name = "tcp";
    // Each backend has connections of its own: a message nobody receives harms nothing.
    t.flags = DISTCOMM_V1_UNRECEIVED_MESSAGES_OK;
    t.init = tcp_init;
    t.finalize = tcp_finalize;
    t.rank = tcp_rank;
    t.size = tcp_size;
    t.isend = tcp_isend;
    t.irecv = tcp_irecv;
    t.test = tcp_test;
    t.wait = tcp_wait;
    t.cancel = tcp_cancel;
    t.free_request = tcp_free;
    t.abort = tcp_abort;
    return t;
  }();
  return &table;
}

// What this backend is and can do (optional: without it, DistComm takes a plugin to run
// processes meeting through the store, and nothing more). Every init meets anew through the
// job's store, so a grown job's ranks connect like a new one's.
extern "C" __attribute__((visibility("default"))) const distcomm_backend_traits_v1*
distcomm_backend_plugin_v1_traits(void) {
  static const distcomm_backend_traits_v1 traits = {
      DISTCOMM_BACKEND_TRAITS_V1_VERSION, sizeof(distcomm_backend_traits_v1),
      DISTCOMM_V1_CAN_PROCESSES | DISTCOMM_V1_CAN_STORE | DISTCOMM_V1_CAN_GROW,
      "TCP sockets between processes, meeting through the job's store (an example plugin)"};
  return &traits;
}
