// distcomm-test-bootstrap: one rank of a job that only meets: bootstrap() from the environment,
// then every rank adds rank + 1 to a store counter and checks the sum after a barrier. Prints
//   rank R/N: bootstrap ok (sum S)
// and exits 0; on failure one line naming the error's kind, and exits 1 (timeout_error 2). The
// launcher tests start it by hand to check what a job sees at start-up (job_clash.sh). With
// PROBE_HOLD_UNTIL=FILE, rank 0 then says "rank 0: store on port P" (where it serves one) and
// keeps serving until FILE exists (30 s at most), so that a test can knock (tmp_owner.sh).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"

namespace dc = distcomm;

int main() {
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  try {
    const dc::job j = dc::bootstrap();
    const int rank = j.world.rank;
    const int size = j.world.size;
    long long sum = size * (size + 1) / 2;
    if (j.kv) {
      j.kv->add("probe/sum", rank + 1);
      dc::store_barrier(*j.kv, "probe/added", rank, size);
      const dc::bytes v = j.kv->get("probe/sum");
      sum = std::stoll(std::string(v.begin(), v.end()));
      // Nobody leaves before every rank has read the sum.
      dc::store_barrier(*j.kv, "probe/read", rank, size);
    }
    const bool ok = sum == static_cast<long long>(size) * (size + 1) / 2;
    std::printf("rank %d/%d: bootstrap %s (sum %lld) after %.2f s\n", rank, size,
                ok ? "ok" : "WRONG SUM", sum, elapsed());
    const char* hold = std::getenv("PROBE_HOLD_UNTIL");
    if (hold != nullptr && rank == 0) {
      if (auto* tcp = dynamic_cast<dc::tcp_store*>(j.kv.get())) {
        std::printf("rank 0: store on port %d\n", tcp->port());
      }
      std::fflush(stdout);
      for (int i = 0; i < 3000 && ::access(hold, F_OK) != 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return ok ? 0 : 1;
  } catch (const dc::timeout_error& e) {
    std::printf("distcomm-test-bootstrap: timeout_error after %.2f s: %s\n", elapsed(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::printf("distcomm-test-bootstrap: error after %.2f s: %s\n", elapsed(), e.what());
    return 1;
  }
}
