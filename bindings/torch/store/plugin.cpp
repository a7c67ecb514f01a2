// libdistcomm_store_c10d.so: the job's store in a c10d TCPStore, DISTCOMM_STORE=c10d://host:port
// [/prefix]. torchrun's agent hosts one for its workers (TORCHELASTIC_USE_AGENT_STORE=True), at
// MASTER_ADDR:MASTER_PORT, under /worker/attempt_<restart count>: bootstrap() names it so, and
// a C++ program under torchrun meets its peers there as torch.distributed's workers do. The
// store's calls are libtorch's own client (c10d::TCPStore), seen as DistComm's store by the
// binding's adapter (../src/c10d_store.hpp). A c10d TCPStore has no authentication.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "../src/c10d_store.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/plugin/store_abi.hpp"

namespace {

using distcomm::rendezvous_error;

struct c10d_address {
  std::string host;
  std::uint16_t port = 0;
  std::string prefix;  // "" for none
};

// "host:port[/prefix]", host a name, an IPv4 address or [IPv6].
c10d_address parse(const distcomm::plugin::store_open& o) {
  const auto bad = [&](const std::string& why) {
    return rendezvous_error("DISTCOMM_STORE='" + o.url + "' " + why +
                            " (expected c10d://host:port[/prefix], e.g. "
                            "c10d://10.0.0.1:29500/worker/attempt_0)");
  };
  c10d_address a;
  const std::string& s = o.address;
  const auto slash = s.find('/');
  const std::string host_port = s.substr(0, slash);
  if (slash != std::string::npos) a.prefix = s.substr(slash);  // c10d's prefixes keep the '/'
  while (a.prefix.size() > 1 && a.prefix.back() == '/') a.prefix.pop_back();
  if (a.prefix == "/") a.prefix.clear();
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= host_port.size()) {
    throw bad("names no host:port");
  }
  a.host = host_port.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  const std::string port = host_port.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535) {
    throw bad("has a port that is not 1..65535");
  }
  a.port = static_cast<std::uint16_t>(std::stoi(port));
  return a;
}

std::shared_ptr<distcomm::store> open_c10d(const distcomm::plugin::store_open& o) {
  const c10d_address a = parse(o);
  c10d::TCPStoreOptions opts;
  opts.port = a.port;
  opts.isServer = false;
  opts.waitWorkers = false;  // the agent counts its workers itself
  // Connecting is given at least 10 s (c10d gives up on a short timeout before a server that
  // is up has answered); every wait after that ends at the store's own timeout.
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(o.timeout);
  opts.timeout = std::max(timeout, std::chrono::milliseconds(10000));
  c10::intrusive_ptr<c10d::Store> s;
  try {
    s = c10::make_intrusive<c10d::TCPStore>(a.host, opts);
  } catch (const c10::Error& e) {
    throw distcomm::timeout_error("rank " + std::to_string(o.rank) + ": no c10d TCPStore at " +
                                  o.url + " answered within " + std::to_string(o.timeout.count()) +
                                  " s (" + e.what_without_backtrace() +
                                  "): is torchrun's agent (or the store's owner) running there?");
  }
  s->setTimeout(timeout);
  if (!a.prefix.empty()) s = c10::make_intrusive<c10d::PrefixStore>(a.prefix, s);
  if (!o.token.empty()) {
    o.log(distcomm::log_level::info,
          "rank " + std::to_string(o.rank) + ": " + o.url +
              " is a c10d TCPStore, which takes no token: DISTCOMM_AUTH_TOKEN is not used there");
  }
  return std::make_shared<distcomm::torch_binding::c10d_store>(s, o.timeout);
}

}  // namespace

DISTCOMM_EXPORT_STORE_V1("c10d", &open_c10d)
