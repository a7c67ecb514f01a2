// Which network interface a TCP transport uses: DISTCOMM_IFACE resolved on this host. Its value
// is an interface name (eth0), a subnet in CIDR form (10.1.0.0/24, fd00::/64: this host's
// address within it, whatever the interface is called on each host), or a host name or address
// to bind. Unset: 127.0.0.1 for a job on one node, else this host's name.
#pragma once

#include <string>
#include <vector>

namespace distcomm {

struct local_address {
  std::string interface;  // eth0
  std::string address;    // 10.1.0.2, fd00::2
};

// This host's addresses (IPv4 and IPv6) on interfaces that are up.
std::vector<local_address> local_addresses();
// "eth0 10.1.0.2, lo 127.0.0.1, ...": for messages.
std::string describe_local_addresses();

// Whether `value` has the form of a subnet (an address, '/', a prefix length).
bool is_subnet(const std::string& value);

// What to bind for `value` (DISTCOMM_IFACE's form): an interface name, host name or address as
// is; a subnet becomes this host's first address within it. invalid_argument_error naming
// `variable` when a subnet is malformed or holds none of this host's addresses.
std::string bind_host(const std::string& value, const char* variable = "DISTCOMM_IFACE");

// The interface that `value` names: an interface name as is; a subnet or an address becomes the
// interface holding this host's address in it (or that address); a host name that resolves to
// none of this host's addresses gives "". invalid_argument_error naming `variable` for a subnet
// or address this host has no interface in, and for a name that is no interface and does not
// resolve.
std::string interface_for(const std::string& value, const char* variable = "DISTCOMM_IFACE");

// The host the TCP transports bind: `given` when not empty, else DISTCOMM_IFACE through
// bind_host(), else 127.0.0.1 when every rank runs on this node, else this host's name.
std::string default_bind_host(const std::string& given, bool single_node);

}  // namespace distcomm
