// distcomm::hierarchical (init/) on ranks as threads: 4 ranks, "hosts" {0, 1} and {2, 3}, each
// level a local communicator of its own. Under the whole job's communicator (the levels'
// allreduce with the outer call's deadline) the level calls run without agreements of their own
// and end by that deadline, however long the levels' own timeout; called alone they agree and
// keep theirs. The levels across real hosts run in tests/multihost.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/backends/local.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/hierarchical.hpp"

using namespace distcomm;
using namespace std::chrono_literals;

namespace {

using flat_comm = communicator<local_backend>;

// Rank r's levels over `world` (4 ranks), each level's timeout `level_timeout`.
hierarchical levels_of_rank(local_world& world, int r, std::chrono::duration<double> level_timeout) {
  config c;
  c.timeout = level_timeout;
  flat_comm whole(world.backend(r), c);
  return hierarchical(any_communicator(std::move(*whole.split(r / 2, r))),
                      any_communicator(std::move(*whole.split(r % 2, r))));
}

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

}  // namespace

TEST_CASE("hierarchical levels: under the outer call, no agreements of their own") {
  local_world world(4), levels(4);
  world.run([&](local_backend b) {
    const int r = b.rank();
    hierarchical h = levels_of_rank(levels, r, 60s);
    std::vector<float> data(1000, static_cast<float>(r + 1));
    const std::uint64_t intra = h.intra().agreements(), inter = h.inter().agreements();
    // As strategy::hierarchical calls it: 3 level calls (and 2 for an uneven tail), none agreed.
    h.allreduce(data.data(), data.size() - 1, dtype::f32, reduce_op::sum, deadline_after(60s));
    CHECK(h.intra().agreements() == intra);
    CHECK(h.inter().agreements() == inter);
    CHECK(data[0] == 10.0f);
    CHECK(data[998] == 10.0f);
    CHECK(data[999] == static_cast<float>(r + 1));
    // Alone, each level call agrees.
    h.allreduce(view(data));
    CHECK(h.intra().agreements() == intra + 2);
    CHECK(h.inter().agreements() == inter + 1);
    CHECK(data[0] == 40.0f);
  });
}

TEST_CASE("hierarchical levels: a rank that never comes fails the others by the outer deadline") {
  // Rank 3 does not call (and stays, so that nobody learns of it by its leaving) until the
  // others are done, 120 s at most. The levels would wait 600 s; the outer call's deadline is
  // 1 s away. Rank 2 (host {2, 3}) waits on rank 3 inside the host, rank 1 across hosts, rank 0
  // on rank 2.
  local_world world(4), levels(4);
  std::atomic<int> done{0};
  world.run([&](local_backend b) {
    const int r = b.rank();
    hierarchical h = levels_of_rank(levels, r, 600s);
    if (r == 3) {
      const auto until = deadline_after(120s);
      while (done.load() < 3 && clock::now() < until) std::this_thread::sleep_for(10ms);
      return;
    }
    std::vector<float> data(1 << 16, 1.0f);
    const auto start = clock::now();
    std::string what;
    try {
      h.allreduce(data.data(), data.size(), dtype::f32, reduce_op::sum, deadline_after(1s));
    } catch (const timeout_error& e) {
      what = e.what();
    } catch (const peer_lost_error& e) {
      what = e.what();
    }
    const double took = seconds_since(start);
    ++done;
    INFO("rank " << r << " after " << took << " s: " << what);
    CHECK(!what.empty());
    CHECK(took < 60.0);  // 1 s, however loaded the machine; the levels' own 600 s never
  });
}
