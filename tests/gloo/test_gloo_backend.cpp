// What only the gloo backend shows, under distcomm-run -np N (N >= 2): abort() on one rank closes
// its connections, so a peer's pending receive from it fails at once with peer_lost_error instead
// of waiting out its deadline. The backend contract and every strategy run in the shared backend
// suite (tests/backends). Exits non-zero with a message on failure.
#include <chrono>
#include <cstdio>
#include <string>

#include "distcomm/backends/gloo.hpp"
#include "distcomm/distcomm.hpp"

namespace dc = distcomm;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
  try {
    dc::job j = dc::bootstrap();
    dc::gloo_backend b(j);
    if (b.size() < 2) {
      std::fprintf(stderr, "run under distcomm-run -np 2 or more\n");
      return 1;
    }
    // Rank 1 aborts: its own later waits fail with the reason, and rank 0's receive from it
    // fails with peer_lost_error well before its 20 s deadline.
    if (b.rank() == 1) {
      b.abort("test abort");
      std::string what;
      try {
        int x = 0;
        b.irecv(&x, sizeof(x), 0, 1001).wait(dc::deadline_after(std::chrono::seconds(5)));
      } catch (const dc::peer_lost_error& e) {
        what = e.what();
      }
      check(what.find("test abort") != std::string::npos,
            "rank 1: no peer_lost_error with the reason after abort(): '" + what + "'");
    } else if (b.rank() == 0) {
      const auto t0 = dc::clock::now();
      bool lost = false;
      try {
        int x = 0;
        b.irecv(&x, sizeof(x), 1, 1001).wait(dc::deadline_after(std::chrono::seconds(20)));
      } catch (const dc::peer_lost_error& e) {
        lost = true;
        std::printf("rank 0: %s\n", e.what());
      }
      const double s = std::chrono::duration<double>(dc::clock::now() - t0).count();
      check(lost && s < 10.0, "rank 0: rank 1's abort: lost=" + std::to_string(lost) + " after " +
                                  std::to_string(s) + " s");
    }
    // Nobody leaves (closing its own connections) before ranks 0 and 1 have checked.
    dc::store_barrier(*j.kv, "test_gloo/done", j.world.rank, j.world.size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAIL: exception: %s\n", e.what());
    return 1;
  }
  if (failures != 0) return 1;
  std::printf("test_gloo_backend: all passed\n");
  return 0;
}
