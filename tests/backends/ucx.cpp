// The backend suite on the UCX backend, under distcomm-run: one rank per process, every backend's
// worker addresses exchanged through the job's store from distcomm::bootstrap().
#define DOCTEST_CONFIG_IMPLEMENT
#include "distcomm/backends/ucx.hpp"
#include "context.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace {

const distcomm::job* the_job = nullptr;
std::chrono::duration<double> the_timeout{0};

struct ucx_env {
  using backend = distcomm::ucx_backend;
  static constexpr bool cancel_retracts = true;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    backend_suite::rank_context<backend> ctx{the_job->world.rank, the_job->world.size, [] {
                                               return distcomm::ucx_backend(*the_job, the_timeout);
                                             }};
    body(ctx);
  }
};

}  // namespace

TYPE_TO_STRING_AS("ucx", ucx_env);
#define DISTCOMM_SUITE_ENVS ucx_env
#include "suite.hpp"

int main(int argc, char** argv) {
  const distcomm::config cfg = distcomm::config::from_env();
  const distcomm::job j = distcomm::bootstrap(cfg);
  the_job = &j;
  the_timeout = cfg.timeout;
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
