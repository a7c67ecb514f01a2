// A backend given no timeout follows DISTCOMM_TIMEOUT, also while connecting: with
// DISTCOMM_TIMEOUT=2 (ctest sets it) and a peer that never comes, constructing a gloo or a ucx
// backend fails after about 2 s naming the timeout, although the store would wait 300 s. One
// process, no launcher.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#ifdef DISTCOMM_HAVE_GLOO
#include "distcomm/backends/gloo.hpp"
#endif
#ifdef DISTCOMM_HAVE_UCX
#include "distcomm/backends/ucx.hpp"
#endif

namespace dc = distcomm;

namespace {

#define CHECK_HAS(text, part)                                      \
  CHECK_MESSAGE(std::string(text).find(part) != std::string::npos, \
                "'" << (text) << "' does not mention '" << (part) << "'")

// The store waits this long: only the backend's own timeout can end the wait sooner.
constexpr std::chrono::seconds store_timeout{300};

// make() throws timeout_error naming `seconds` after about that long. SIGALRM ends the process
// should it wait for the store instead.
template <class Make>
void fails_after(double seconds, Make&& make) {
  ::alarm(60);
  const auto start = std::chrono::steady_clock::now();
  std::string what = "<no timeout_error>";
  try {
    make();
  } catch (const dc::timeout_error& e) {
    what = e.what();
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  ::alarm(0);
  char limit[64];
  std::snprintf(limit, sizeof limit, "after %g s (DISTCOMM_TIMEOUT)", seconds);
  CHECK_HAS(what, limit);
  CHECK_HAS(what, "is every rank running?");
  CHECK(took.count() >= seconds * 0.9);
  CHECK(took.count() < seconds + 30);
}

}  // namespace

TEST_CASE("connect timeout: ctest runs this with DISTCOMM_TIMEOUT=2") {
  const char* t = std::getenv("DISTCOMM_TIMEOUT");
  REQUIRE(t != nullptr);
  CHECK(std::string(t) == "2");
}

#ifdef DISTCOMM_HAVE_GLOO
TEST_CASE("connect timeout: gloo without a timeout waits DISTCOMM_TIMEOUT for a missing peer") {
  auto kv = std::make_shared<dc::hash_store>(store_timeout);
  fails_after(2, [&] { dc::gloo_backend b(kv, 0, 2); });
}

TEST_CASE("connect timeout: gloo_options::timeout, when given, wins") {
  auto kv = std::make_shared<dc::hash_store>(store_timeout);
  dc::gloo_options o;
  o.timeout = std::chrono::seconds(1);
  fails_after(1, [&] { dc::gloo_backend b(kv, 0, 2, o); });
}
#endif

#ifdef DISTCOMM_HAVE_UCX
TEST_CASE("connect timeout: ucx without a timeout waits DISTCOMM_TIMEOUT for a missing peer") {
  dc::hash_store kv(store_timeout);
  fails_after(2, [&] { dc::ucx_backend b(kv, 0, 2); });
}

TEST_CASE("connect timeout: ucx's timeout argument, when given, wins") {
  dc::hash_store kv(store_timeout);
  fails_after(1, [&] { dc::ucx_backend b(kv, 0, 2, std::chrono::seconds(1)); });
}
#endif
