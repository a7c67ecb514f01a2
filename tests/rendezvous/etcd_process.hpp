// etcd_process: a one-member etcd cluster for the tests of etcd_store (test_store.cpp,
// test_etcd_store.cpp), on 127.0.0.1 and two free ports, its data in a fresh folder, stopped
// (SIGTERM) and removed when destroyed. Values up to 16 MiB: --max-request-bytes 32 MiB.
#pragma once

#include <string>
#include <vector>

#include "server_process.hpp"

extern char** environ;

namespace distcomm::testing {

class etcd_process {
 public:
  // Throws std::runtime_error, with etcd's log, when it does not serve within 20 s.
  explicit etcd_process(const std::string& program) : client_port_(server_process::free_port()) {
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(server_process::free_port());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    server_.start({program, "--name", "m0", "--data-dir", server_.dir() + "/data",
                   "--listen-client-urls", client, "--advertise-client-urls", client,
                   "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                   "--initial-cluster", "m0=" + peer, "--max-request-bytes", "33554432"},
                  env, [this] {
                    return server_.log_text().find("ready to serve client requests") !=
                           std::string::npos;
                  });
  }

  // "127.0.0.1:port", as etcd_address::endpoints names a member.
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string log_text() const { return server_.log_text(); }
  void stop() { server_.stop(); }

 private:
  server_process server_;
  int client_port_;
};

}  // namespace distcomm::testing
