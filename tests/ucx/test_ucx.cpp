// The UCX backend's own cases under distcomm-run (2 and 3 processes, the transports UCX picks and
// TCP on lo): abort() fails this rank's waits with the reason and its notice reaches every peer.
// The point-to-point contract and every strategy x dtype x op x count run on this backend in the
// shared suite (tests/backends, backends_ucx_np*).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "distcomm/backends/ucx.hpp"
#include "distcomm/distcomm.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace dc = distcomm;

// UCP has no collectives: strategy::native must not compile with this backend.
static_assert(!dc::has_native_allreduce_v<dc::ucx_backend>);

namespace {

dc::job* the_job = nullptr;
int barrier_seq = 0;

// Every rank runs the same test cases in the same order, so a counter names each barrier.
void sync_all() {
  dc::store_barrier(*the_job->kv, "test_ucx/" + std::to_string(barrier_seq++), the_job->world.rank,
                    the_job->world.size);
}

dc::deadline soon() { return dc::deadline_after(std::chrono::seconds(30)); }

}  // namespace

TEST_CASE("ucx abort fails later waits") {
  const int me = the_job->world.rank;
  dc::ucx_backend b(*the_job);
  sync_all();
  if (me == 0) {
    std::int64_t x = 0;
    auto r = b.irecv(&x, 8, 1, 5);
    b.abort("test abort");
    try {
      r.wait(soon());
      FAIL("wait after abort returned");
    } catch (const dc::peer_lost_error& e) {
      CHECK(std::string(e.what()).find("test abort") != std::string::npos);
    }
    CHECK_THROWS_AS((void)b.isend(&x, 8, 1, 5), dc::peer_lost_error);
  } else {
    // The abort's notice reaches every peer: a wait on rank 0 fails at once, with the reason.
    std::int64_t x = 0;
    std::string what;
    try {
      auto r = b.irecv(&x, 8, 0, 5);
      r.wait(soon());
    } catch (const dc::peer_lost_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("rank 0 aborted: test abort") != std::string::npos, what);
  }
  sync_all();  // nobody tears down (and force-closes) before rank 0 checked
}

int main(int argc, char** argv) {
  dc::job j = dc::bootstrap();
  the_job = &j;
  doctest::Context ctx(argc, argv);
  const int rc = ctx.run();
  the_job = nullptr;
  return rc;
}