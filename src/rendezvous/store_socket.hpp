// Socket plumbing for tcp_store (private): an owning descriptor, listening, connecting and exact
// reads/writes that all honour a deadline (poll before every syscall, never a blocking read).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace distcomm::detail {

class socket_fd {
 public:
  socket_fd() noexcept = default;
  explicit socket_fd(int fd) noexcept : fd_(fd) {}
  ~socket_fd() { reset(); }
  socket_fd(socket_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

using io_clock = std::chrono::steady_clock;

std::string errno_text(int e);
// "127.0.0.1:29500", "[::1]:29500".
std::string host_port(const std::string& host, int port);
std::string peer_name(const sockaddr* addr, socklen_t len);
bool set_nonblocking(int fd) noexcept;
// The kernel ends a connection whose peer went silent (a host lost without FIN or RST: power, a
// cable, a partition) within about `within`: keepalive probes after within/2 of silence, 3 more
// within/6 apart, and data unacknowledged for `within` (TCP_USER_TIMEOUT); at least 1 s each. A
// stopped process's kernel still answers. Without it a lost host's connections, with the keys
// they hold and their slots, stay open for good.
void keep_alive(int fd, std::chrono::duration<double> within) noexcept;

// A listening, non-blocking socket on host:port (see tcp_store_server for what host may be);
// bound_port receives the port. rendezvous_error naming address and port on failure.
socket_fd listen_on(const std::string& host, int port, int& bound_port);

// One connection attempt to every address of host:port, each bounded by the deadline. An empty
// socket_fd on failure, with the reason in `why`.
socket_fd try_connect(const std::string& host, int port, io_clock::time_point deadline,
                      std::string& why);

enum class io_result { ok, timeout, closed };
// Writes / reads exactly size bytes before the deadline. `closed` sets err (0 for an orderly
// close by the peer).
io_result send_all(int fd, const void* data, std::size_t size, io_clock::time_point deadline,
                   int& err);
io_result recv_all(int fd, void* data, std::size_t size, io_clock::time_point deadline, int& err);

}  // namespace distcomm::detail
