// The backend suite on the gloo backend, under distcomm-run: one rank per process, every backend
// connected through the job's store from distcomm::bootstrap().
#define DOCTEST_CONFIG_IMPLEMENT
#include "distcomm/backends/gloo.hpp"
#include "context.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace {

const distcomm::job* the_job = nullptr;
distcomm::gloo_options the_options;

struct gloo_env {
  using backend = distcomm::gloo_backend;
  // A destroyed receive that no message matched yet is retracted (backends/gloo/src/gloo_p2p.cpp).
  static constexpr bool cancel_retracts = true;
  // A message waits at its sender until its receiver posts a receive for it (gloo's unbound
  // buffers): which of two arrived first is not known before.
  static constexpr bool sets_messages_aside = false;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    backend_suite::rank_context<backend> ctx{the_job->world.rank, the_job->world.size, [] {
                                               return distcomm::gloo_backend(*the_job, the_options);
                                             }};
    body(ctx);
  }
};

}  // namespace

TYPE_TO_STRING_AS("gloo", gloo_env);
#define DISTCOMM_SUITE_ENVS gloo_env
#include "suite.hpp"

int main(int argc, char** argv) {
  const distcomm::config cfg = distcomm::config::from_env();
  const distcomm::job j = distcomm::bootstrap(cfg);
  the_job = &j;
  the_options.timeout = cfg.timeout;
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
