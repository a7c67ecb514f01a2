// distcomm-test-bootstrap: one rank of a job that only meets: bootstrap() from the environment,
// then every rank adds rank + 1 to a store counter and checks the sum after a barrier. Prints
//   rank R/N: bootstrap ok (sum S)
// and exits 0; on failure one line naming the error's kind, and exits 1 (timeout_error 2). The
// launcher tests start it by hand to check what a job sees at start-up (job_clash.sh).
#include <chrono>
#include <cstdio>
#include <string>

#include "distcomm/core/error.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

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
    return ok ? 0 : 1;
  } catch (const dc::timeout_error& e) {
    std::printf("distcomm-test-bootstrap: timeout_error after %.2f s: %s\n", elapsed(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::printf("distcomm-test-bootstrap: error after %.2f s: %s\n", elapsed(), e.what());
    return 1;
  }
}
