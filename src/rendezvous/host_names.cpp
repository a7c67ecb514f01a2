#include "distcomm/rendezvous/host_names.hpp"

#include <unistd.h>

namespace distcomm {

std::string this_host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

std::vector<std::string> host_names(store& kv, const std::string& prefix, int rank, int size,
                                    std::chrono::duration<double> timeout) {
  const std::string mine = this_host_name();
  std::vector<std::string> hosts(static_cast<std::size_t>(size));
  hosts[static_cast<std::size_t>(rank)] = mine;
  if (size <= 1) return hosts;
  kv.set(prefix + std::to_string(rank), bytes(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int q = 0; q < size; ++q) keys.push_back(prefix + std::to_string(q));
  store_wait(kv, keys, timeout);
  for (int q = 0; q < size; ++q) {
    const bytes v = kv.get(keys[static_cast<std::size_t>(q)]);
    hosts[static_cast<std::size_t>(q)] = std::string(v.begin(), v.end());
  }
  return hosts;
}

}  // namespace distcomm
