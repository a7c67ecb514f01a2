// DISTCOMM_IFACE resolved on this host (rendezvous/interface.hpp): interface names, addresses,
// subnets (this host's address within them), and the errors for what this host does not have.
// Only the loopback interface is assumed (every Linux host has lo with 127.0.0.1).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/interface.hpp"

using namespace distcomm;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

std::string error_of(const std::string& value, bool bind) {
  try {
    if (bind) {
      (void)bind_host(value);
    } else {
      (void)interface_for(value);
    }
  } catch (const invalid_argument_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("interface: this host's addresses include loopback") {
  bool lo = false;
  for (const local_address& a : local_addresses()) lo = lo || (a.address == "127.0.0.1");
  CHECK(lo);
  CHECK_HAS(describe_local_addresses(), "127.0.0.1");
}

TEST_CASE("interface: a subnet becomes this host's address and interface in it") {
  CHECK(is_subnet("127.0.0.0/8"));
  CHECK(is_subnet("fd00::/64"));
  CHECK_FALSE(is_subnet("eth0"));
  CHECK_FALSE(is_subnet("127.0.0.1"));
  CHECK(bind_host("127.0.0.0/8") == "127.0.0.1");
  CHECK(bind_host("127.0.0.1/32") == "127.0.0.1");
  CHECK(bind_host("0.0.0.0/0") != "");  // every IPv4 address is in it
  CHECK(interface_for("127.0.0.0/8") == interface_for("127.0.0.1"));
  CHECK(interface_for("127.0.0.0/8") != "");
}

TEST_CASE("interface: names, addresses and host names pass through bind_host") {
  CHECK(bind_host("eth7") == "eth7");  // checked later, by the transport that binds it
  CHECK(bind_host("127.0.0.1") == "127.0.0.1");
  CHECK(bind_host("localhost") == "localhost");
  const std::string lo = interface_for("127.0.0.1");
  CHECK(interface_for(lo) == lo);
  CHECK(interface_for("localhost") == lo);
}

// A documentation subnet (RFC 5737) that holds none of this host's addresses (test machines do
// use them).
std::string foreign_subnet() {
  for (const char* net : {"198.51.100.", "203.0.113.", "192.0.2."}) {
    bool mine = false;
    for (const local_address& a : local_addresses()) mine = mine || a.address.rfind(net, 0) == 0;
    if (!mine) return std::string(net) + "0/24";
  }
  return "";
}

TEST_CASE("interface: a subnet without this host's address is refused, naming the variable") {
  const std::string net = foreign_subnet();
  REQUIRE(net != "");
  const std::string e = error_of(net, true);
  CHECK_HAS(e, "DISTCOMM_IFACE=" + net);
  CHECK_HAS(e, "no address of this host");
  CHECK_HAS(e, "127.0.0.1");
  CHECK_HAS(error_of(net, false), "no address of this host");
  const std::string one = net.substr(0, net.size() - 4) + "7";  // an address in it
  CHECK_HAS(error_of(one, false), "is not an address of this host");
}

TEST_CASE("interface: malformed subnets, and names that are nothing here, are refused") {
  for (const char* bad : {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "fd00::/129", "eth0/24"}) {
    CAPTURE(bad);
    CHECK_HAS(error_of(bad, true), "is not a subnet");
  }
  const std::string e = error_of("no-such-interface.invalid", false);
  CHECK_HAS(e, "neither a network interface of this host");
  CHECK_HAS(e, "DISTCOMM_IFACE=no-such-interface.invalid");
}

TEST_CASE("interface: default_bind_host: given, DISTCOMM_IFACE, loopback on one node") {
  ::unsetenv("DISTCOMM_IFACE");
  CHECK(default_bind_host("10.9.9.9", true) == "10.9.9.9");
  CHECK(default_bind_host("", true) == "127.0.0.1");
  CHECK(default_bind_host("", false) != "");  // this host's name
  ::setenv("DISTCOMM_IFACE", "127.0.0.0/8", 1);
  CHECK(default_bind_host("", false) == "127.0.0.1");
  ::unsetenv("DISTCOMM_IFACE");
}
