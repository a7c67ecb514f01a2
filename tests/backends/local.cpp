// The backend suite on the local backend: ranks are threads of this process, worlds of 2 and 3.
// A plain unit test; it also checks the suite itself without any launcher.
#include <deque>
#include <mutex>

#include "context.hpp"
#include "distcomm/backends/local.hpp"

namespace {

template <int N>
struct local_env {
  using backend = distcomm::local_backend;
  static constexpr bool cancel_retracts = true;

  // The n-th backend a rank makes is its handle on the n-th world of the test case, as the n-th
  // backend of a process is a transport of its own on the other backends: communicators in use
  // at the same time (an engine's thread and the control communicator) do not share mailboxes.
  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    distcomm::local_world world(N);
    std::mutex mutex;
    std::deque<distcomm::local_world> more;  // stable addresses
    world.run([&](distcomm::local_backend b) {
      const int r = b.rank();
      std::size_t made = 0;
      const auto make = [&, r]() mutable {
        std::lock_guard<std::mutex> lock(mutex);
        while (more.size() <= made) more.emplace_back(N);
        return more[made++].backend(r);
      };
      backend_suite::rank_context<backend> ctx{r, N, make};
      body(ctx);
    });
  }
};

}  // namespace

TYPE_TO_STRING_AS("local np2", local_env<2>);
TYPE_TO_STRING_AS("local np3", local_env<3>);
TYPE_TO_STRING_AS("local np4", local_env<4>);
#define DISTCOMM_SUITE_ENVS local_env<2>, local_env<3>, local_env<4>
#include "suite.hpp"
