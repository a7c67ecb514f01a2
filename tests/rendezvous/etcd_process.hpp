// etcd_process: a one-member etcd cluster for the tests of etcd_store (test_store.cpp), on
// 127.0.0.1 and two free ports, its data in a fresh folder, stopped (SIGTERM) and removed when
// destroyed. Values up to 16 MiB: --max-request-bytes 32 MiB.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace distcomm::testing {

class etcd_process {
 public:
  // Throws std::runtime_error, with etcd's log, when it does not serve within 20 s.
  explicit etcd_process(const std::string& program) {
    char tmpl[] = "/tmp/distcomm_etcd_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    client_port_ = free_port();
    const int peer_port = free_port();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {program,        "--name",
                                     "m0",           "--data-dir",
                                     dir_ + "/data", "--listen-client-urls",
                                     client,         "--advertise-client-urls",
                                     client,         "--listen-peer-urls",
                                     peer,           "--initial-advertise-peer-urls",
                                     peer,           "--initial-cluster",
                                     "m0=" + peer,   "--max-request-bytes",
                                     "33554432"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir_ + "/log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc = ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
    for (int i = 0; i < 2000; ++i) {
      if (log_text().find("ready to serve client requests") != std::string::npos) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        throw std::runtime_error("etcd exited before it served: " + log_text());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error("etcd did not serve within 20 s: " + log_text());
  }
  ~etcd_process() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  etcd_process(const etcd_process&) = delete;
  etcd_process& operator=(const etcd_process&) = delete;

  // "127.0.0.1:port", as etcd_address::endpoints names a member.
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string log_text() const {
    std::ifstream in(dir_ + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void stop() {
    if (pid_ == 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      throw std::runtime_error("no free port on 127.0.0.1");
    }
    ::close(fd);
    return ntohs(a.sin_port);
  }

  std::string dir_;
  pid_t pid_ = 0;
  int client_port_ = 0;
};

}  // namespace distcomm::testing
