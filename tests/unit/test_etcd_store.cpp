// etcd_store beyond the store contract (test_store.cpp runs that on it): DISTCOMM_STORE's form,
// one job per prefix, the job's lease on every key, etcd's authentication with the job's token,
// garbage and a flood at etcd's port, members that do not answer.
// Against a real etcd (etcd_process.hpp); without one installed, each case says it is skipped.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../../src/rendezvous/etcd_client.hpp"
#include "../rendezvous/etcd_process.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/etcd_store.hpp"

using namespace distcomm;
using seconds = std::chrono::duration<double>;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other exception: ") + e.what() + ">";
  }
  return "<no exception>";
}

bytes b(const std::string& s) { return bytes(s.begin(), s.end()); }

etcd_address at(const std::string& endpoint, const std::string& prefix,
                const std::string& user = {}) {
  return parse_etcd_url("etcd://" + (user.empty() ? "" : user + "@") + endpoint + "/" + prefix);
}

}  // namespace

TEST_CASE("parse_etcd_url: members, prefix, user; the mistakes named") {
  const etcd_address a = parse_etcd_url("etcd://10.0.0.1:2379,node2:2379,[::1]:2380/jobs/42/");
  REQUIRE(a.endpoints.size() == 3);
  CHECK(a.endpoints[0] == "10.0.0.1:2379");
  CHECK(a.endpoints[1] == "node2:2379");
  CHECK(a.endpoints[2] == "[::1]:2380");
  CHECK(a.prefix == "jobs/42");
  CHECK(a.user.empty());
  CHECK(parse_etcd_url("etcd://trainer@h:1/p").user == "trainer");
  const auto bad = [](const std::string& url) {
    return error_of<rendezvous_error>([&] { parse_etcd_url(url); });
  };
  CHECK_HAS(bad("http://h:2379/p"), "is not an etcd:// address");
  CHECK_HAS(bad("etcd://h:2379"), "has no prefix");
  CHECK_HAS(bad("etcd://h:2379/"), "has no prefix");
  CHECK_HAS(bad("etcd://h/p"), "member 'h' that is not host:port");
  CHECK_HAS(bad("etcd://h:99999/p"), "port is not 1..65535");
  CHECK_HAS(bad("etcd://u:pw@h:1/p"), "give it as DISTCOMM_AUTH_TOKEN");
  CHECK_HAS(bad("etcd://a:1,,b:2/p"), "member '' that is not host:port");
  CHECK_HAS(bad("etcd://::1:2379/p"), "not host:port");
}

#ifdef DISTCOMM_ETCD

TEST_CASE("etcd_store: a prefix belongs to one job; every key holds the job's lease") {
  testing::etcd_process etcd(DISTCOMM_ETCD);
  etcd_store first(at(etcd.endpoint(), "jobs/a"), seconds(5), {}, job_identity{4, "train-1"});
  etcd_store second(at(etcd.endpoint(), "jobs/a"), seconds(5), {}, job_identity{4, "train-1"});
  first.set("x", b("1"));
  CHECK(second.get("x") == b("1"));
  // Another job on the prefix is refused at once, naming both; on another prefix it is welcome.
  const std::string msg = error_of<rendezvous_error>([&] {
    etcd_store(at(etcd.endpoint(), "jobs/a"), seconds(5), {}, job_identity{2, "train-2"});
  });
  CHECK_HAS(msg, "the prefix 'jobs/a'");
  CHECK_HAS(msg,
            "belongs to another job (world size 4, job 'train-1'; this rank: world size 2, "
            "job 'train-2')");
  etcd_store other(at(etcd.endpoint(), "jobs/b"), seconds(5), {}, job_identity{2, "train-2"});
  CHECK_FALSE(other.check({"x"}));

  // The key as etcd holds it: under the prefix, with the lease both clients share, which lives.
  detail::etcd_client raw({etcd.endpoint()}, {}, {});
  const auto deadline = detail::deadline_after(seconds(5));
  const detail::json kv =
      raw.call("/v3/kv/range", {{"key", detail::to_base64("jobs/a/k/x")}}, deadline)["kvs"][0];
  const std::string lease = kv.value("lease", "0");
  CHECK(lease != "0");
  const detail::json lease_key =
      raw.call("/v3/kv/range", {{"key", detail::to_base64("jobs/a/lease")}}, deadline)["kvs"][0];
  CHECK(detail::from_base64(lease_key.value("value", ""), "lease") == b(lease));
  const detail::json ttl = raw.call("/v3/lease/timetolive", {{"ID", lease}}, deadline);
  const long left = std::stol(ttl.value("TTL", "0"));
  CHECK(left > 0);
  CHECK(left <= etcd_store::lease_ttl.count());
  // Revoked (as when it expires), the job's keys go with it; a new client makes a new lease.
  raw.call("/v3/lease/revoke", {{"ID", lease}}, deadline);
  etcd_store rerun(at(etcd.endpoint(), "jobs/a"), seconds(5), {}, job_identity{2, "train-2"});
  CHECK_FALSE(rerun.check({"x"}));
  rerun.set("y", b("2"));
  CHECK(rerun.get("y") == b("2"));
}

TEST_CASE("etcd_store: etcd's authentication, the job's token as the password") {
  testing::etcd_process etcd(DISTCOMM_ETCD);
  detail::etcd_client admin({etcd.endpoint()}, {}, {});
  const auto deadline = detail::deadline_after(seconds(10));
  const std::string token = "job-token-0123456789abcdef";
  admin.call("/v3/auth/user/add", {{"name", "root"}, {"password", "root-pw-0123456789"}}, deadline);
  admin.call("/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}}, deadline);
  admin.call("/v3/auth/role/add", {{"name", "jobs"}}, deadline);
  admin.call("/v3/auth/role/grant",
             {{"name", "jobs"},
              {"perm",
               {{"permType", "READWRITE"},
                {"key", detail::to_base64("jobs/")},
                {"range_end", detail::to_base64("jobs0")}}}},
             deadline);
  admin.call("/v3/auth/user/add", {{"name", "trainer"}, {"password", token}}, deadline);
  admin.call("/v3/auth/user/grant", {{"user", "trainer"}, {"role", "jobs"}}, deadline);
  admin.call("/v3/auth/enable", detail::json::object(), deadline);

  etcd_store good(at(etcd.endpoint(), "jobs/c", "trainer"), seconds(5), token);
  good.set("k", b("v"));
  CHECK(good.get("k") == b("v"));
  CHECK(good.add("n", 2) == 2);

  const std::string wrong = error_of<rendezvous_error>(
      [&] { etcd_store(at(etcd.endpoint(), "jobs/c", "trainer"), seconds(5), "not-the-token"); });
  CHECK_HAS(wrong, "etcd refused the user 'trainer'");
  CHECK_HAS(wrong, "DISTCOMM_AUTH_TOKEN");
  const std::string none =
      error_of<rendezvous_error>([&] { etcd_store(at(etcd.endpoint(), "jobs/c"), seconds(5)); });
  CHECK_HAS(none, "etcd_store: etcd at " + etcd.endpoint() + " refused");
  // Outside the role's keys, even the right user is refused.
  const std::string outside = error_of<rendezvous_error>(
      [&] { etcd_store(at(etcd.endpoint(), "other/c", "trainer"), seconds(5), token); });
  CHECK_HAS(outside, "permission denied");
}

TEST_CASE("etcd_store: garbage and a flood of silent connections at etcd leave the job served") {
  testing::etcd_process etcd(DISTCOMM_ETCD);
  const int port = std::stoi(etcd.endpoint().substr(etcd.endpoint().rfind(':') + 1));
  const auto connect_to = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
  };
  std::vector<int> held;
  for (int i = 0; i < 500; ++i) held.push_back(connect_to());  // say nothing
  const std::string garbage(4096, '\xab');
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_to();
    ::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL);
    held.push_back(fd);
  }
  // A request that lies about its length, and one whose JSON is cut off.
  for (const std::string& request :
       {std::string("POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{"),
        std::string(
            "POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n{\"key\":\"")}) {
    const int fd = connect_to();
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    held.push_back(fd);
  }
  etcd_store s(at(etcd.endpoint(), "jobs/e"), seconds(5), {}, job_identity{2, "flooded"});
  s.set("k", b("v"));
  CHECK(s.get("k") == b("v"));
  CHECK(s.add("n", 3) == 3);
  for (const int fd : held) ::close(fd);
}

TEST_CASE("etcd_store: a member that does not answer is left for the next; none: timeout_error") {
  testing::etcd_process etcd(DISTCOMM_ETCD);
  // A first member nobody listens on: the store goes on to the real one.
  etcd_address a = at("127.0.0.1:1," + etcd.endpoint(), "jobs/d");
  etcd_store s(a, seconds(10));
  s.set("k", b("v"));
  CHECK(s.get("k") == b("v"));
  etcd.stop();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = error_of<timeout_error>([&] {
    s.set_timeout(seconds(1));
    s.set("k", b("w"));
  });
  CHECK_HAS(msg, "no member of the etcd cluster 127.0.0.1:1," + etcd.endpoint());
  CHECK_HAS(msg, "DISTCOMM_TIMEOUT");
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 4.0);
}

#else
TEST_CASE("etcd_store: against a real etcd (skipped: etcd is not installed)") {
  MESSAGE(
      "skipped: these cases need etcd (apt-get install etcd-server), not found when DistComm "
      "was configured");
}
#endif
