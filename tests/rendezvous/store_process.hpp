// store_process: a distcomm-store process for the tests that run the store contract and the
// attacks on it against the standalone server as well as the in-process one (test_store.cpp,
// test_tcp_store.cpp, store_scale.cpp). It listens on 127.0.0.1 and a free port, writes its stderr
// (the server's log) to a file, and is stopped with SIGTERM when destroyed.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
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

class store_process {
 public:
  // `program`: the distcomm-store executable; `token`: DISTCOMM_AUTH_TOKEN for it ("" runs it
  // with --no-auth); `args`: more options (--world-size, --job-id, ...). Throws
  // std::runtime_error, with its log, when it does not listen within 10 s.
  store_process(const std::string& program, const std::string& token,
                std::vector<std::string> args = {}) {
    char tmpl[] = "/tmp/distcomm_store_process_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    std::vector<std::string> argv_text = {program,       "--host",       "127.0.0.1", "--port", "0",
                                          "--port-file", dir_ + "/port", "--timeout", "600"};
    if (token.empty()) argv_text.emplace_back("--no-auth");
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("DISTCOMM_AUTH_TOKEN", 0) != 0) env_text.push_back(entry);
    }
    if (!token.empty()) env_text.push_back("DISTCOMM_AUTH_TOKEN=" + token);
    std::vector<char*> argv, envp;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = log_path();
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int rc =
        ::posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
    }
    for (int i = 0; i < 1000 && port_ == 0; ++i) {
      std::ifstream in(dir_ + "/port");
      if (!(in >> port_)) port_ = 0;
      if (port_ == 0) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = 0;
          throw std::runtime_error(program + " exited before it listened: " + log_text());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (port_ == 0) {
      stop();
      throw std::runtime_error(program + " did not listen within 10 s: " + log_text());
    }
  }
  ~store_process() {
    stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  store_process(const store_process&) = delete;
  store_process& operator=(const store_process&) = delete;

  int port() const noexcept { return port_; }
  std::string log_text() const {
    std::ifstream in(log_path());
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Waits up to 2 s for the server to log `part`.
  bool saw(const std::string& part) const {
    for (int i = 0; i < 200; ++i) {
      if (log_text().find(part) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // SIGTERM, then its exit status (-1 when it was already stopped).
  int stop() {
    if (pid_ == 0) return -1;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }

 private:
  std::string log_path() const { return dir_ + "/log"; }

  std::string dir_;
  pid_t pid_ = 0;
  int port_ = 0;
};

}  // namespace distcomm::testing
