// store_process: a distcomm-store process for the tests that run the store contract and the
// attacks on it against the standalone server as well as the in-process one (test_store.cpp,
// test_tcp_store.cpp, store_scale.cpp). It listens on 127.0.0.1 and a free port, logs to a file,
// and is stopped with SIGTERM when destroyed.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "server_process.hpp"

extern char** environ;

namespace distcomm::testing {

class store_process {
 public:
  // `program`: the distcomm-store executable; `token`: DISTCOMM_AUTH_TOKEN for it ("" runs it
  // with --no-auth); `args`: more options (--world-size, --job-id, ...). Throws
  // std::runtime_error, with its log, when it does not listen within 20 s.
  store_process(const std::string& program, const std::string& token,
                std::vector<std::string> args = {}) {
    const std::string port_file = server_.dir() + "/port";
    std::vector<std::string> argv = {program,       "--host",  "127.0.0.1", "--port", "0",
                                     "--port-file", port_file, "--timeout", "600"};
    if (token.empty()) argv.emplace_back("--no-auth");
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("DISTCOMM_AUTH_TOKEN", 0) != 0) env.push_back(entry);
    }
    if (!token.empty()) env.push_back("DISTCOMM_AUTH_TOKEN=" + token);
    server_.start(argv, env, [&] {
      std::ifstream in(port_file);
      return static_cast<bool>(in >> port_) && port_ != 0;
    });
  }

  int port() const noexcept { return port_; }
  pid_t pid() const noexcept { return server_.pid(); }
  std::string log_text() const { return server_.log_text(); }
  bool saw(const std::string& part) const { return server_.saw(part); }
  int stop() { return server_.stop(); }

 private:
  server_process server_;
  int port_ = 0;
};

}  // namespace distcomm::testing
