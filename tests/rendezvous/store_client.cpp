// distcomm-test-store-client: one client of a running store (DISTCOMM_STORE_ADDR=host:port, no
// token), for tests that cut a host off (lost_client.sh):
//   distcomm-test-store-client hold KEY        holds KEY, says "held KEY", then waits (600 s)
//   distcomm-test-store-client wait-gone KEY S says "gone after T s" once KEY is gone (exit 0),
//                                              or "still held after S s" (exit 1)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace dc = distcomm;

int main(int argc, char** argv) {
  const std::string verb = argc > 2 ? argv[1] : "";
  if (argc < 3 || (verb != "hold" && verb != "wait-gone") || (verb == "wait-gone" && argc < 4)) {
    std::fprintf(stderr, "usage: %s hold KEY | wait-gone KEY SECONDS\n", argv[0]);
    return 2;
  }
  try {
    const auto a = dc::store_addr_from_env([](const char* n) { return std::getenv(n); });
    if (!a) {
      std::fprintf(stderr, "distcomm-test-store-client: set DISTCOMM_STORE_ADDR=host:port\n");
      return 2;
    }
    auto kv = dc::make_tcp_store(a->host, a->port, false, std::chrono::seconds(30));
    const std::string key = argv[2];
    if (verb == "hold") {
      if (!kv->hold(key, dc::bytes{1})) {
        std::fprintf(stderr, "distcomm-test-store-client: this store cannot hold keys\n");
        return 1;
      }
      std::printf("held %s\n", key.c_str());
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(600));
      return 0;
    }
    const double limit = std::atof(argv[3]);
    const auto start = std::chrono::steady_clock::now();
    const auto since = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    while (kv->check({key})) {
      if (since() > limit) {
        std::printf("still held after %.1f s\n", since());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("gone after %.1f s\n", since());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-test-store-client: %s\n", e.what());
    return 1;
  }
}
