// What only the gloo backend shows, under distcomm-run -np N (N >= 2; ranks above 1 only take part
// in building each backend): abort() tells the peers why; a cancelled receive of a large message
// hands it to the next receive; ranks that each wait for their own large send first still finish;
// a cancelled large send that nobody takes closes that connection and tells the peer why; small
// sends (complete at once) still arrive when the sender drops its backend right away. The backend
// contract and every strategy run in the shared backend suite (tests/backends). Every test case
// builds its own backend on every rank, in the same order.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backends/gloo.hpp"
#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

namespace {

const dc::job* the_job = nullptr;

int rank() { return the_job->world.rank; }

void barrier(const std::string& name) {
  dc::store_barrier(*the_job->kv, "test_gloo/" + name, the_job->world.rank, the_job->world.size);
}

// Far beyond any healthy wait; short enough that a hang fails well inside ctest's limit.
dc::deadline soon() { return dc::deadline_after(std::chrono::seconds(20)); }

// Above eager_bytes (16 KiB): the size word and the payload travel apart.
constexpr std::size_t large = 64 << 10;

std::vector<std::int64_t> filled(std::size_t bytes, std::int64_t base) {
  std::vector<std::int64_t> v(bytes / sizeof(std::int64_t));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<std::int64_t>(i);
  return v;
}

}  // namespace

TEST_CASE("abort() fails the peers' pending receives at once, with the reason") {
  dc::gloo_backend b(*the_job);
  if (rank() == 1) {
    b.abort("test abort");
    std::string what;
    try {
      int x = 0;
      b.irecv(&x, sizeof x, 0, 1001).wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("test abort") != std::string::npos, what);
  } else if (rank() == 0) {
    const auto t0 = dc::clock::now();
    std::string what;
    try {
      int x = 0;
      b.irecv(&x, sizeof x, 1, 1001).wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("test abort") != std::string::npos, what);
    CHECK(dc::clock::now() - t0 < std::chrono::seconds(10));
  }
  barrier("abort");  // nobody closes its connections before ranks 0 and 1 have checked
}

TEST_CASE("a cancelled receive of a large message hands that message to the next receive") {
  dc::gloo_backend b(*the_job);
  const dc::tag_t tag = 7;
  std::vector<std::int64_t> old(large / sizeof(std::int64_t), -5);
  if (rank() == 0) {
    auto r = b.irecv(old.data(), large, 1, tag);
    CHECK_FALSE(r.test());
  }  // destroyed while pending
  barrier("cancel-large/posted");
  if (rank() == 1) {
    const auto first = filled(large, 1000);
    const auto second = filled(large, 2000);
    auto s1 = b.isend(first.data(), large, 0, tag);
    auto s2 = b.isend(second.data(), large, 0, tag);
    s1.wait(soon());
    s2.wait(soon());
  } else if (rank() == 0) {
    std::vector<std::int64_t> got(large / sizeof(std::int64_t), 0);
    b.irecv(got.data(), large, 1, tag).wait(soon());
    CHECK(got == filled(large, 1000));
    b.irecv(got.data(), large, 1, tag).wait(soon());
    CHECK(got == filled(large, 2000));
    CHECK(old == std::vector<std::int64_t>(old.size(), -5));
  }
  barrier("cancel-large/done");
}

TEST_CASE("ranks that each wait for their own large send before receiving both finish") {
  dc::gloo_backend b(*the_job);
  if (rank() <= 1) {
    const int peer = 1 - rank();
    // Each rank sends on a tag of its own: the peer matches that send only while it waits for
    // something else, its own send.
    const auto mine = filled(4 * large, 100 * rank());
    std::vector<std::int64_t> theirs(mine.size(), 0);
    auto r = b.irecv(theirs.data(), 4 * large, peer, 20 + static_cast<dc::tag_t>(peer));
    auto s = b.isend(mine.data(), 4 * large, peer, 20 + static_cast<dc::tag_t>(rank()));
    s.wait(soon());
    r.wait(soon());
    CHECK(theirs == filled(4 * large, 100 * peer));
  }
  barrier("send-first");
}

TEST_CASE("a cancelled large send that nobody takes closes that connection and tells the peer") {
  std::optional<dc::gloo_backend> b(std::in_place, *the_job);
  if (rank() == 1) {
    const auto data = filled(large, 0);
    {
      auto s = b->isend(data.data(), large, 0, 30);  // rank 0 posts no receive on tag 30
      CHECK_FALSE(s.test());
    }  // destroyed: waits up to 1 s for rank 0, then closes the connection to it
    std::string what;
    try {
      auto s = b->isend(data.data(), 8, 0, 31);
      s.wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("closed its connection to rank 0") != std::string::npos, what);
  } else if (rank() == 0) {
    std::string what;
    try {
      std::int64_t x = 0;
      b->irecv(&x, sizeof x, 1, 32).wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("rank 1") != std::string::npos, what);
    CHECK_MESSAGE(what.find("cancelled") != std::string::npos, what);
  }
  barrier("cancel-send");
}

TEST_CASE("small sends arrive although the sender drops its backend at once") {
  std::optional<dc::gloo_backend> b(std::in_place, *the_job);
  const int n = 10;
  if (rank() == 1) {
    for (int k = 0; k < n; ++k) {
      const std::int64_t v[2] = {k, -k};
      auto s = b->isend(v, sizeof v, 0, 40);
      CHECK(s.test());  // complete at once: the backend sends its own copy
    }
    the_job->kv->add("test_gloo/drop", 1);
    b.reset();  // returns once gloo has written them
  } else if (rank() == 0) {
    the_job->kv->wait({"test_gloo/drop"});  // rank 1 is dropping its backend
    for (int k = 0; k < n; ++k) {
      std::int64_t v[2] = {-1, -1};
      b->irecv(v, sizeof v, 1, 40).wait(soon());
      CHECK(v[0] == k);
      CHECK(v[1] == -k);
    }
  }
  barrier("drop");
}

int main(int argc, char** argv) {
  const dc::job j = dc::bootstrap();
  the_job = &j;
  if (j.world.size < 2) {
    std::fprintf(stderr, "run under distcomm-run -np 2 or more\n");
    return 1;
  }
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
