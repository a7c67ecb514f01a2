// tcp_store beyond the shared contract: the server survives garbage, oversized and truncated
// messages from raw sockets; waits are parked, not blocking; connect retries until the server
// appears and gives up at the deadline; port in use; connection limit; authentication (both
// ways, wrong and missing tokens, a rogue server); the token from the environment or a file;
// several real processes. Everything talks to 127.0.0.1 only.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

using namespace distcomm;
using namespace std::chrono_literals;
using seconds = std::chrono::duration<double>;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

bytes b(const std::string& s) { return bytes(s.begin(), s.end()); }
std::string str(const bytes& v) { return std::string(v.begin(), v.end()); }

double since(std::chrono::steady_clock::time_point t0) {
  return seconds(std::chrono::steady_clock::now() - t0).count();
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
  return "<no exception>";
}

// A port nothing listens on (bound once, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A plain blocking socket to 127.0.0.1:port with a 2 s receive timeout, for speaking the
// protocol (or nonsense) by hand.
class raw_socket {
 public:
  explicit raw_socket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{2, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~raw_socket() { ::close(fd_); }
  void send(const bytes& data) const {
    ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);  // the server may already have closed
  }
  // Reads exactly n bytes (fewer when the peer closes or 2 s pass).
  bytes recv(std::size_t n) const {
    bytes out(n);
    std::size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
  }
  // True when the server closed the connection (reads drain to EOF within 2 s).
  bool closed_by_peer() const {
    char buf[4096];
    for (;;) {
      const ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r == 0) return true;
      if (r < 0) return errno == ECONNRESET;
    }
  }
  // The no-token handshake of protocol version 1 (docs/STORE.md).
  void handshake() const {
    const bytes greeting = recv(39);
    REQUIRE(greeting.size() == 39);
    REQUIRE(std::string(greeting.begin(), greeting.begin() + 4) == "DCST");
    bytes hello = b("DCST");
    hello.push_back(1);  // version
    hello.push_back(0);  // no token
    hello.resize(hello.size() + 32, 7);
    send(hello);
    const bytes proof = recv(33);
    REQUIRE(proof.size() == 33);
    REQUIRE(proof[0] == 0);
    send(bytes(32, 0));
    const bytes verdict = recv(1);
    REQUIRE(verdict == bytes{0});
  }

 private:
  int fd_;
};

void put_u32(bytes& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
}

// Redirects stderr (where distcomm::log writes) to a file while alive.
class stderr_capture {
 public:
  stderr_capture() {
    std::fflush(stderr);
    saved_ = ::dup(2);
    char tmpl[] = "/tmp/distcomm_log_XXXXXX";
    file_ = ::mkstemp(tmpl);
    path_ = tmpl;
    ::dup2(file_, 2);
  }
  ~stderr_capture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    ::close(file_);
    ::unlink(path_.c_str());
  }
  std::string text() const {
    std::ifstream in(path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Waits up to 2 s for the server thread to log `part`.
  bool saw(const std::string& part) const {
    for (int i = 0; i < 200; ++i) {
      if (text().find(part) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

 private:
  int saved_ = -1;
  int file_ = -1;
  std::string path_;
};

const char* token_a = "job-token-0123456789abcdef";
const char* token_b = "other-token-0123456789abcdef";

}  // namespace

TEST_CASE("tcp_store: garbage, oversized and truncated messages close only their connection") {
  stderr_capture log;
  tcp_store_server server("127.0.0.1", 0);
  tcp_store good("127.0.0.1", server.port(), seconds(2.0));
  good.set("k", b("v"));

  SUBCASE("random bytes instead of a hello") {
    raw_socket raw(server.port());
    raw.send(bytes(500, 0xab));
    CHECK(raw.closed_by_peer());
  }
  SUBCASE("a key length of 4 GiB") {
    raw_socket raw(server.port());
    raw.handshake();
    bytes frame{2};  // get
    put_u32(frame, 0xffffffffu);
    raw.send(frame);
    const bytes header = raw.recv(5);
    REQUIRE(header.size() == 5);
    CHECK(header[0] == 3);  // error, with a message, then the server closes
    CHECK(raw.closed_by_peer());
    CHECK(log.saw("closing the connection from 127.0.0.1:"));
    CHECK_HAS(log.text(), "key of 4294967295 bytes is above the limit of 4096 bytes");
  }
  SUBCASE("a 4 KiB + 1 key on the wire") {
    raw_socket raw(server.port());
    raw.handshake();
    bytes frame{1};
    put_u32(frame, 4097);
    raw.send(frame);
    CHECK(raw.closed_by_peer());
  }
  SUBCASE("a value of 16 MiB + 1 announced") {
    raw_socket raw(server.port());
    raw.handshake();
    bytes frame{1};
    put_u32(frame, 1);
    frame.push_back('x');
    put_u32(frame, (16u << 20) + 1);
    raw.send(frame);
    CHECK(raw.closed_by_peer());
  }
  SUBCASE("an unknown command") {
    raw_socket raw(server.port());
    raw.handshake();
    raw.send(bytes{99, 0, 0, 0, 0});
    CHECK(raw.closed_by_peer());
  }
  SUBCASE("half a frame, then gone") {
    raw_socket raw(server.port());
    raw.handshake();
    bytes frame{1};
    put_u32(frame, 3);
    frame.push_back('a');
    raw.send(frame);
  }
  SUBCASE("a parked wait whose client disappears") {
    {
      raw_socket raw(server.port());
      raw.handshake();
      bytes frame{5};  // wait
      put_u32(frame, 0);
      put_u32(frame, 4 + 4 + 4 + 6);
      put_u32(frame, 5000);  // ms
      put_u32(frame, 1);     // one key
      put_u32(frame, 6);
      for (char c : std::string("absent")) frame.push_back(static_cast<std::uint8_t>(c));
      raw.send(frame);
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(50ms);
    good.set("absent", b("now"));
  }
  // The well-behaved client was never disturbed.
  CHECK(str(good.get("k")) == "v");
  CHECK(good.add("c", 1) == 1);
  tcp_store fresh("127.0.0.1", server.port(), seconds(2.0));
  CHECK(str(fresh.get("k")) == "v");
}

TEST_CASE("tcp_store: waits are parked on the server, other clients keep being served") {
  tcp_store_server server("127.0.0.1", 0);
  tcp_store waiter("127.0.0.1", server.port(), seconds(2.0));
  tcp_store busy("127.0.0.1", server.port(), seconds(2.0));
  std::atomic<bool> got{false};
  std::thread t([&] {
    waiter.wait({"go"});
    got = true;
  });
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) busy.set("k" + std::to_string(i), b("v"));
  CHECK(since(t0) < 0.5);
  CHECK_FALSE(got.load());
  busy.set("go", b("1"));
  t.join();
  CHECK(got.load());
}

TEST_CASE("tcp_store: a stopping server ends a parked wait at once, not at the timeout") {
  auto server = std::make_unique<tcp_store_server>("127.0.0.1", 0);
  tcp_store client("127.0.0.1", server->port(), seconds(2.0));
  std::string msg;
  std::thread t([&] { msg = error_of<peer_lost_error>([&] { client.get("never"); }); });
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();
  t.join();
  CHECK(since(t0) < 1.0);
  CHECK_HAS(msg, "lost the connection to the store at 127.0.0.1:");
}

TEST_CASE("tcp_store: connect retries until the server appears") {
  const int port = free_port();
  std::unique_ptr<tcp_store> client;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread t([&] { client = std::make_unique<tcp_store>("127.0.0.1", port, seconds(2.0)); });
  std::this_thread::sleep_for(300ms);
  tcp_store_server server("127.0.0.1", port);
  t.join();
  REQUIRE(client);
  CHECK(since(t0) >= 0.3);
  CHECK(since(t0) < 1.5);
  client->set("x", b("1"));
  CHECK(str(client->get("x")) == "1");
}

TEST_CASE("tcp_store: connect gives up at the deadline, naming the address") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg =
      error_of<timeout_error>([&] { tcp_store("127.0.0.1", port, seconds(0.3)); });
  CHECK(since(t0) >= 0.29);
  CHECK(since(t0) < 1.0);
  CHECK_HAS(msg, "could not connect to the store at 127.0.0.1:" + std::to_string(port));
  CHECK_HAS(msg, "within 0.3 s");
  CHECK_HAS(msg, "Connection refused");
  CHECK_HAS(msg, "DISTCOMM_TIMEOUT");
}

TEST_CASE("tcp_store: a port in use is an error naming address and port") {
  tcp_store_server first("127.0.0.1", 0);
  const std::string msg =
      error_of<rendezvous_error>([&] { tcp_store_server second("127.0.0.1", first.port()); });
  CHECK(msg == "tcp_store: cannot listen on 127.0.0.1:" + std::to_string(first.port()) +
                   ": Address already in use");
}

TEST_CASE("tcp_store: connections beyond the limit are refused with a clear error") {
  tcp_store_server server("127.0.0.1", 0, "", 2);
  stderr_capture log;
  auto a = std::make_unique<tcp_store>("127.0.0.1", server.port(), seconds(1.0));
  tcp_store c2("127.0.0.1", server.port(), seconds(1.0));
  const std::string msg =
      error_of<rendezvous_error>([&] { tcp_store("127.0.0.1", server.port(), seconds(1.0)); });
  CHECK_HAS(msg, "refused the connection");
  CHECK_HAS(msg, "max_connections");
  CHECK(log.saw("refused a connection from 127.0.0.1:"));
  a.reset();
  for (int i = 0; i < 100 && server.connections() >= 2; ++i) std::this_thread::sleep_for(10ms);
  tcp_store again("127.0.0.1", server.port(), seconds(1.0));
  again.set("ok", b("1"));
  CHECK(str(c2.get("ok")) == "1");
}

TEST_CASE("tcp_store: authentication") {
  stderr_capture log;
  tcp_store_server server("127.0.0.1", 0, token_a);
  const std::string where = "127.0.0.1:" + std::to_string(server.port());

  SUBCASE("the right token is accepted") {
    tcp_store c("127.0.0.1", server.port(), seconds(1.0), token_a);
    c.set("secret", b("42"));
    CHECK(str(c.get("secret")) == "42");
  }
  SUBCASE("a wrong token is refused, and the server logs the peer") {
    const std::string msg = error_of<rendezvous_error>(
        [&] { tcp_store("127.0.0.1", server.port(), seconds(1.0), token_b); });
    CHECK_HAS(msg, "authentication failed: the store at " + where +
                       " did not accept this token (DISTCOMM_AUTH_TOKEN)");
    CHECK(log.saw("refused a client from 127.0.0.1:"));
    CHECK_HAS(log.text(), "[distcomm warn]");
    CHECK_HAS(log.text(), "authentication failed");
  }
  SUBCASE("no token is refused") {
    const std::string msg =
        error_of<rendezvous_error>([&] { tcp_store("127.0.0.1", server.port(), seconds(1.0)); });
    CHECK_HAS(msg, "authentication failed: the store at " + where + " requires a token");
    CHECK_HAS(msg, "DISTCOMM_AUTH_TOKEN");
    CHECK(log.saw("it has no token and this server requires one"));
  }
  SUBCASE("a token is refused by a server without one") {
    tcp_store_server open_server("127.0.0.1", 0);
    const std::string msg = error_of<rendezvous_error>(
        [&] { tcp_store("127.0.0.1", open_server.port(), seconds(1.0), token_a); });
    CHECK_HAS(msg, "authentication failed: this process has a token");
    CHECK_HAS(msg, "runs without one");
    CHECK(log.saw("this server runs without one"));
  }
  SUBCASE("a raw client that skips the handshake gets nothing") {
    raw_socket raw(server.port());
    const bytes greeting = raw.recv(39);
    REQUIRE(greeting.size() == 39);
    CHECK(greeting[6] == 1);  // the server asks for authentication
    bytes hello = b("DCST");
    hello.push_back(1);
    hello.push_back(1);  // claims a token
    hello.resize(38, 0);
    raw.send(hello);
    CHECK(raw.recv(33).size() == 33);
    raw.send(bytes(32, 0));  // but cannot compute the MAC
    CHECK(raw.recv(1) == bytes{5});
    CHECK(raw.closed_by_peer());
  }
  // After all that, the server still serves its job.
  tcp_store c("127.0.0.1", server.port(), seconds(1.0), token_a);
  CHECK(c.add("n", 1) == 1);
}

TEST_CASE("tcp_store: a rogue server without the token gets no MAC from the client") {
  // A listener that speaks the greeting, claims authentication and sends a made-up proof.
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 1) == 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  bytes answer;
  std::thread rogue([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    bytes greeting = b("DCST");
    greeting.push_back(1);
    greeting.push_back(0);
    greeting.push_back(1);
    greeting.resize(39, 9);
    ::send(c, greeting.data(), greeting.size(), MSG_NOSIGNAL);
    std::uint8_t hello[38];
    ::recv(c, hello, sizeof hello, MSG_WAITALL);
    bytes proof(33, 0x42);
    proof[0] = 0;
    ::send(c, proof.data(), proof.size(), MSG_NOSIGNAL);
    answer.resize(32);
    const ssize_t n = ::recv(c, answer.data(), answer.size(), MSG_WAITALL);
    answer.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    ::close(c);
  });
  const std::string msg =
      error_of<rendezvous_error>([&] { tcp_store("127.0.0.1", port, seconds(1.0), token_a); });
  rogue.join();
  ::close(lfd);
  CHECK_HAS(msg, "authentication failed");
  CHECK_HAS(msg, "could not prove it holds the same token");
  CHECK(answer == bytes(32, 0));
}

TEST_CASE("auth_token_from_env: variable, file, and the mistakes") {
  using env = std::map<std::string, std::string>;
  const auto token_of = [](const env& e) {
    return auth_token_from_env([&](const char* name) -> const char* {
      const auto it = e.find(name);
      return it == e.end() ? nullptr : it->second.c_str();
    });
  };
  char tmpl[] = "/tmp/distcomm_token_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  const std::string path = tmpl;
  const auto write_file = [&](const std::string& text, mode_t mode) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), mode);
  };

  CHECK(token_of({}).empty());
  CHECK(token_of({{"DISTCOMM_AUTH_TOKEN", token_a}}) == token_a);
  write_file(std::string(token_b) + "\n", 0600);
  {
    stderr_capture log;
    CHECK(token_of({{"DISTCOMM_AUTH_TOKEN_FILE", path}}) == token_b);
    CHECK(log.text().empty());
  }
  write_file(std::string(token_b) + "\r\n", 0644);
  {
    stderr_capture log;
    CHECK(token_of({{"DISTCOMM_AUTH_TOKEN_FILE", path}}) == token_b);
    CHECK_HAS(log.text(), "accessible to group or others (mode 0644)");
  }
  {
    stderr_capture log;
    CHECK(token_of({{"DISTCOMM_AUTH_TOKEN", "short"}}) == "short");
    CHECK_HAS(log.text(), "use at least 16");
  }
  write_file("\n", 0600);
  CHECK_HAS(error_of<rendezvous_error>([&] {
              token_of({{"DISTCOMM_AUTH_TOKEN_FILE", path}});
            }),
            "is empty");
  CHECK_HAS(error_of<rendezvous_error>([&] {
              token_of({{"DISTCOMM_AUTH_TOKEN", ""}});
            }),
            "DISTCOMM_AUTH_TOKEN is set but empty");
  CHECK_HAS(error_of<rendezvous_error>([&] {
              token_of({{"DISTCOMM_AUTH_TOKEN", token_a}, {"DISTCOMM_AUTH_TOKEN_FILE", path}});
            }),
            "set only one");
  ::close(fd);
  ::unlink(path.c_str());
  CHECK_HAS(error_of<rendezvous_error>([&] {
              token_of({{"DISTCOMM_AUTH_TOKEN_FILE", path}});
            }),
            "cannot be read: No such file or directory");

  // The token from the environment authenticates for real.
  tcp_store_server server("127.0.0.1", 0, token_of({{"DISTCOMM_AUTH_TOKEN", token_a}}));
  tcp_store c("127.0.0.1", server.port(), seconds(1.0),
              token_of({{"DISTCOMM_AUTH_TOKEN", token_a}}));
  c.set("x", b("1"));
}

TEST_CASE("store_addr_from_env") {
  const auto addr_of = [](const char* value) {
    return store_addr_from_env([&](const char* name) -> const char* {
      return std::string(name) == "DISTCOMM_STORE_ADDR" ? value : nullptr;
    });
  };
  CHECK_FALSE(addr_of(nullptr).has_value());
  CHECK_FALSE(addr_of("").has_value());
  CHECK(addr_of("10.0.0.1:29500")->host == "10.0.0.1");
  CHECK(addr_of("10.0.0.1:29500")->port == 29500);
  CHECK(addr_of("node01:1")->host == "node01");
  CHECK(addr_of("[::1]:29500")->host == "::1");
  CHECK_HAS(error_of<rendezvous_error>([&] { addr_of("node01"); }), "has no port");
  CHECK_HAS(error_of<rendezvous_error>([&] { addr_of("node01:http"); }), "not a number");
  CHECK_HAS(error_of<rendezvous_error>([&] { addr_of("node01:70000"); }), "outside 1..65535");
  CHECK_HAS(error_of<rendezvous_error>([&] { addr_of("::1:29500"); }), "without []");
}

TEST_CASE("make_tcp_store: the server side hosts the store and is a client of it") {
  auto host = make_tcp_store("127.0.0.1", 0, true, seconds(1.0), token_a);
  const auto* hosted = dynamic_cast<tcp_store*>(host.get());
  REQUIRE(hosted);
  REQUIRE(hosted->server());
  const int port = hosted->server()->port();
  auto other = make_tcp_store("127.0.0.1", port, false, seconds(1.0), token_a);
  other->set("from", b("client"));
  CHECK(str(host->get("from")) == "client");
  std::thread t([&] { store_barrier(*other, "b", 1, 2); });
  store_barrier(*host, "b", 0, 2);
  t.join();
}

TEST_CASE("tcp_store: real processes add, wait and meet at a barrier") {
  constexpr int children = 4;
  int port_pipe[2];
  REQUIRE(::pipe(port_pipe) == 0);
  // The children start before the server exists, so they also exercise connect retry; no thread
  // runs in this process while it forks.
  std::vector<pid_t> pids;
  for (int rank = 1; rank <= children; ++rank) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(port_pipe[1]);
      int code = 1;
      try {
        int port = 0;
        pollfd p{port_pipe[0], POLLIN, 0};
        if (::poll(&p, 1, 5000) == 1 && ::read(port_pipe[0], &port, sizeof port) == sizeof port) {
          tcp_store s("127.0.0.1", port, seconds(2.0), token_a);
          s.add("arrived", 1);
          s.set("rank/" + std::to_string(rank), b(std::to_string(rank * 10)));
          store_barrier(s, "all", rank, children + 1);
          const int next = rank % children + 1;
          code = str(s.get("rank/" + std::to_string(next))) == std::to_string(next * 10) ? 0 : 2;
          s.wait({"parent/done"});
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", rank, e.what());
        code = 3;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::this_thread::sleep_for(50ms);
  tcp_store_server server("127.0.0.1", 0, token_a);
  const int port = server.port();
  for (int i = 0; i < children; ++i) {
    REQUIRE(::write(port_pipe[1], &port, sizeof port) == sizeof port);
  }
  tcp_store parent("127.0.0.1", port, seconds(2.0), token_a);
  store_barrier(parent, "all", 0, children + 1);
  CHECK(str(parent.get("arrived")) == std::to_string(children));
  parent.set("parent/done", b("1"));
  for (const pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  ::close(port_pipe[0]);
  ::close(port_pipe[1]);
}
