// The backend suite on the local backend: ranks are threads of this process, worlds of 2 and 3.
// A plain unit test; it also checks the suite itself without any launcher.
#include "distcomm/backends/local.hpp"
#include "context.hpp"

namespace {

template <int N>
struct local_env {
  using backend = distcomm::local_backend;
  static constexpr bool cancel_retracts = true;

  // One world per test case; a rank's backends are all handles on it. Its communicators run
  // one after the other in the same order on every rank, so sharing the mailboxes is safe.
  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    distcomm::local_world world(N);
    world.run([&](distcomm::local_backend b) {
      const int r = b.rank();
      backend_suite::rank_context<backend> ctx{r, N, [&world, r] { return world.backend(r); }};
      body(ctx);
    });
  }
};

}  // namespace

TYPE_TO_STRING_AS("local np2", local_env<2>);
TYPE_TO_STRING_AS("local np3", local_env<3>);
#define DISTCOMM_SUITE_ENVS local_env<2>, local_env<3>
#include "suite.hpp"
