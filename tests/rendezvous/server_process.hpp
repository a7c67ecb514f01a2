// server_process: a server program the store tests run as a child (distcomm-store, etcd), in a
// fresh folder of its own, its output in <folder>/log; stopped with SIGTERM and its folder removed
// when destroyed. store_process.hpp and etcd_process.hpp start theirs through it.
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
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace distcomm::testing {

class server_process {
 public:
  server_process() {
    char tmpl[] = "/tmp/distcomm_server_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~server_process() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  // The folder of its own (for data, port files).
  const std::string& dir() const noexcept { return dir_; }

  // Starts `args` (args[0] the program) with environment `env` ("NAME=value"), its stdout and
  // stderr in the log, then waits up to 20 s for `ready()`. std::runtime_error, with the log,
  // when it exits first or is not ready in time.
  void start(std::vector<std::string> args, std::vector<std::string> env,
             const std::function<bool()>& ready) {
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir_ + "/log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int rc =
        ::posix_spawn(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
    for (int i = 0; i < 2000; ++i) {
      if (ready()) return;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        throw std::runtime_error(args[0] + " exited before it served: " + log_text());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop();
    throw std::runtime_error(args[0] + " did not serve within 20 s: " + log_text());
  }

  // What it wrote so far.
  std::string log_text() const {
    std::ifstream in(dir_ + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Waits up to 2 s for it to log `part`.
  bool saw(const std::string& part) const {
    for (int i = 0; i < 200; ++i) {
      if (log_text().find(part) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  pid_t pid() const noexcept { return pid_; }
  // SIGTERM, then its wait status (-1 when it was not running).
  int stop() {
    if (pid_ == 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }

  // A TCP port on 127.0.0.1 that was free a moment ago.
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

 private:
  std::string dir_;
  pid_t pid_ = 0;
};

}  // namespace distcomm::testing
