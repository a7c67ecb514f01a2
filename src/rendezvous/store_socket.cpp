// Socket plumbing for tcp_store: see store_socket.hpp.
#include "store_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "distcomm/core/error.hpp"

namespace distcomm::detail {
namespace {

// The listen backlog: a whole job's ranks may connect at the same moment.
// Connections the kernel queues for accept(): SOMAXCONN, which the kernel caps at
// net.core.somaxconn (4096 by default since Linux 5.4). Thousands of ranks connect at once.
constexpr int listen_backlog = SOMAXCONN;

// Milliseconds left until the deadline, rounded up so a poll never returns just before it.
int remaining_ms(io_clock::time_point deadline) {
  const auto left = deadline - io_clock::now();
  if (left <= io_clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

// Waits for events on fd; false at the deadline.
bool wait_for(int fd, short events, io_clock::time_point deadline, int& err) {
  for (;;) {
    const int ms = remaining_ms(deadline);
    if (ms == 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return true;  // errors and hang-ups surface in the following send/recv
    if (r < 0 && errno != EINTR) {
      err = errno;
      return true;
    }
  }
}

struct addrinfo_list {
  addrinfo* head = nullptr;
  ~addrinfo_list() {
    if (head) ::freeaddrinfo(head);
  }
};

}  // namespace

void socket_fd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text(int e) { return std::system_category().message(e); }

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string peer_name(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  char serv[NI_MAXSERV] = "?";
  if (::getnameinfo(addr, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown peer";
  }
  return host_port(host, std::atoi(serv));
}

bool set_nonblocking(int fd) noexcept {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

socket_fd listen_on(const std::string& host, int port, int& bound_port) {
  const std::string shown = host_port(host.empty() ? "0.0.0.0" : host, port);
  if (port < 0 || port > 65535) {
    throw rendezvous_error("tcp_store: cannot listen on " + shown + ": port out of range 0..65535");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo_list list;
  // No host: every interface, IPv6 first (dual stack) when the system resolves "::" at all.
  const std::string service = std::to_string(port);
  const int gai =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list.head);
  if (gai != 0) {
    throw rendezvous_error("tcp_store: cannot listen on " + shown + ": " + ::gai_strerror(gai));
  }
  int last_error = EADDRNOTAVAIL;
  // Prefer IPv6 for the wildcard (dual stack serves IPv4 too); otherwise resolver order.
  std::vector<addrinfo*> candidates;
  for (addrinfo* a = list.head; a; a = a->ai_next) candidates.push_back(a);
  if (host.empty()) {
    std::stable_sort(candidates.begin(), candidates.end(), [](addrinfo* a, addrinfo* b) {
      return a->ai_family == AF_INET6 && b->ai_family != AF_INET6;
    });
  }
  for (addrinfo* a : candidates) {
    socket_fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6 && host.empty()) {
      const int zero = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd.get(), listen_backlog) != 0 || !set_nonblocking(fd.get())) {
      last_error = errno;
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = errno;
      continue;
    }
    bound_port = local.ss_family == AF_INET6
                     ? ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port)
                     : ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    return fd;
  }
  if (last_error == EADDRINUSE) {
    // Most often another job (or an earlier run still exiting) holds the port: say what to do.
    throw rendezvous_error("tcp_store: cannot listen on " + shown + ": " + errno_text(last_error) +
                           ": another process (another job's store?) already uses port " +
                           std::to_string(port) +
                           "; choose another MASTER_PORT (or DISTCOMM_MASTER_PORT)");
  }
  throw rendezvous_error("tcp_store: cannot listen on " + shown + ": " + errno_text(last_error));
}

void keep_alive(int fd, std::chrono::duration<double> within) noexcept {
  const double s = std::max(within.count(), 3.0);
  const int on = 1;
  const int idle = static_cast<int>(std::min(s / 2, 1e6));
  const int interval = std::max(1, static_cast<int>(std::min(s / 6, 1e6)));
  const int count = 3;
  const auto user_timeout = static_cast<unsigned>(std::min(s * 1000, 4e9));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

socket_fd try_connect(const std::string& host, int port, io_clock::time_point deadline,
                      std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo_list list;
  const std::string service = std::to_string(port);
  const int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &list.head);
  if (gai != 0) {
    why = std::string("cannot resolve '") + host + "': " + ::gai_strerror(gai);
    return {};
  }
  for (addrinfo* a = list.head; a; a = a->ai_next) {
    socket_fd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) {
      why = errno_text(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = 0;
        if (!wait_for(fd.get(), POLLOUT, deadline, err)) {
          why = "connect timed out";
          continue;
        }
        if (err == 0) {
          socklen_t len = sizeof err;
          if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
    }
    if (err != 0) {
      why = errno_text(err);
      continue;
    }
    const int one = 1;
    // Requests are small and strictly request-response: Nagle would only add latency.
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
  }
  return {};
}

io_result send_all(int fd, const void* data, std::size_t size, io_clock::time_point deadline,
                   int& err) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      err = 0;
      if (!wait_for(fd, POLLOUT, deadline, err)) return io_result::timeout;
      if (err) return io_result::closed;
      continue;
    }
    err = n < 0 ? errno : 0;
    return io_result::closed;
  }
  return io_result::ok;
}

io_result recv_all(int fd, void* data, std::size_t size, io_clock::time_point deadline, int& err) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      err = 0;
      return io_result::closed;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      err = 0;
      if (!wait_for(fd, POLLIN, deadline, err)) return io_result::timeout;
      if (err) return io_result::closed;
      continue;
    }
    err = errno;
    return io_result::closed;
  }
  return io_result::ok;
}

}  // namespace distcomm::detail
