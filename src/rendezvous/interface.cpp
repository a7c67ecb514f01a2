#include "distcomm/rendezvous/interface.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm {

namespace {

// An IPv4 or IPv6 address as bytes (4 or 16 of them); empty when `text` is neither.
std::string address_bytes(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)] = {};
  if (::inet_pton(AF_INET, text.c_str(), buf) == 1) return std::string(buf, buf + 4);
  if (::inet_pton(AF_INET6, text.c_str(), buf) == 1) return std::string(buf, buf + 16);
  return {};
}

bool same_prefix(const std::string& a, const std::string& b, int bits) {
  if (a.size() != b.size()) return false;
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    const unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;
    if ((static_cast<unsigned char>(a[static_cast<std::size_t>(i)]) & mask) !=
        (static_cast<unsigned char>(b[static_cast<std::size_t>(i)]) & mask)) {
      return false;
    }
  }
  return true;
}

struct subnet {
  std::string network;  // bytes
  int bits = 0;
};

subnet parse_subnet(const std::string& value, const char* variable) {
  const std::size_t slash = value.find('/');
  subnet s;
  s.network = address_bytes(value.substr(0, slash));
  const std::string len = value.substr(slash + 1);
  char* end = nullptr;
  const long bits = std::strtol(len.c_str(), &end, 10);
  const long most = static_cast<long>(s.network.size() * 8);
  if (s.network.empty() || len.empty() || *end != '\0' || bits < 0 || bits > most) {
    throw invalid_argument_error(std::string(variable) + "=" + value +
                                 " is not a subnet (an IPv4 or IPv6 address, '/', a prefix length "
                                 "of at most 32 or 128 bits, e.g. 10.1.0.0/24)");
  }
  s.bits = static_cast<int>(bits);
  return s;
}

// This host's address within `value` (a subnet), with its interface.
local_address in_subnet(const std::string& value, const char* variable) {
  const subnet s = parse_subnet(value, variable);
  for (const local_address& a : local_addresses()) {
    if (same_prefix(address_bytes(a.address), s.network, s.bits)) return a;
  }
  throw invalid_argument_error(std::string(variable) + "=" + value +
                               ": no address of this host is in that subnet (this host has " +
                               describe_local_addresses() +
                               "); name the subnet the peers reach this host in");
}

}  // namespace

std::vector<local_address> local_addresses() {
  std::vector<local_address> all;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return all;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    if (::inet_ntop(family, raw, text, sizeof text) == nullptr) continue;
    all.push_back({i->ifa_name, text});
  }
  ::freeifaddrs(list);
  return all;
}

std::string describe_local_addresses() {
  std::string out;
  for (const local_address& a : local_addresses()) {
    out += (out.empty() ? "" : ", ") + a.interface + " " + a.address;
  }
  return out.empty() ? "no addresses" : out;
}

bool is_subnet(const std::string& value) {
  const std::size_t slash = value.find('/');
  return slash != std::string::npos && !address_bytes(value.substr(0, slash)).empty();
}

std::string bind_host(const std::string& value, const char* variable) {
  if (value.find('/') == std::string::npos) return value;
  return in_subnet(value, variable).address;
}

std::string interface_for(const std::string& value, const char* variable) {
  if (value.find('/') != std::string::npos) return in_subnet(value, variable).interface;
  if (::if_nametoindex(value.c_str()) != 0) return value;
  const std::string bytes = address_bytes(value);
  if (bytes.empty()) {
    // A host name: the interface of the first of its addresses this host has, if any.
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(value.c_str(), nullptr, &hints, &found); rc != 0) {
      throw invalid_argument_error(std::string(variable) + "=" + value +
                                   " is neither a network interface of this host (" +
                                   describe_local_addresses() +
                                   ") nor a name or address it resolves (" + ::gai_strerror(rc) +
                                   "); name an interface, address or subnet the peers can reach");
    }
    std::string name;
    for (const addrinfo* f = found; f != nullptr && name.empty(); f = f->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      if (::getnameinfo(f->ai_addr, f->ai_addrlen, text, sizeof text, nullptr, 0,
                        NI_NUMERICHOST) != 0) {
        continue;
      }
      for (const local_address& a : local_addresses()) {
        if (address_bytes(a.address) == address_bytes(text)) name = a.interface;
      }
    }
    ::freeaddrinfo(found);
    return name;
  }
  for (const local_address& a : local_addresses()) {
    if (address_bytes(a.address) == bytes) return a.interface;
  }
  throw invalid_argument_error(std::string(variable) + "=" + value +
                               " is not an address of this host (this host has " +
                               describe_local_addresses() + ")");
}

std::string default_bind_host(const std::string& given, bool single_node) {
  if (!given.empty()) return given;
  if (const std::string iface = config::from_env().iface; !iface.empty()) return bind_host(iface);
  if (single_node) return "127.0.0.1";
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

}  // namespace distcomm
