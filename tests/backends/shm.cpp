// The backend suite on the shm backend, under distcomm-run: one rank per process, every backend
// connected through the job's store from distcomm::bootstrap().
#define DOCTEST_CONFIG_IMPLEMENT
#include <dirent.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "distcomm/backends/shm.hpp"
#include "context.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace {

const distcomm::job* the_job = nullptr;
distcomm::shm_options the_options;

struct shm_env {
  using backend = distcomm::shm_backend;
  // A destroyed receive that no message matched yet is retracted (backends/shm/src/shm.cpp).
  static constexpr bool cancel_retracts = true;

  static void run(const std::function<void(backend_suite::rank_context<backend>&)>& body) {
    backend_suite::rank_context<backend> ctx{the_job->world.rank, the_job->world.size, [] {
                                               return distcomm::shm_backend(*the_job, the_options);
                                             }};
    body(ctx);
  }
};

}  // namespace

// The names in /dev/shm of this process's segments (distcomm-shm.<uid>.<pid>.<n>).
static std::vector<std::string> own_segments() {
  std::vector<std::string> found;
  const std::string mine =
      "distcomm-shm." + std::to_string(::getuid()) + "." + std::to_string(::getpid()) + ".";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(mine, 0) == 0) found.emplace_back(e->d_name);
    }
    ::closedir(dir);
  }
  return found;
}

TEST_CASE("shm: a connected backend leaves no name in /dev/shm; the memory stays usable") {
  std::vector<distcomm::shm_backend> made;
  for (int i = 0; i < 2; ++i) made.push_back(distcomm::shm_backend(*the_job, the_options));
  CHECK(own_segments().empty());
  const auto until = distcomm::deadline_after(std::chrono::seconds(30));
  std::vector<double> v(1000, the_job->world.rank + 1.0);
  made[1].native_allreduce(v.data(), v.data(), v.size(), distcomm::dtype::f64,
                           distcomm::reduce_op::sum, until);
  const int p = the_job->world.size;
  CHECK(v.front() == p * (p + 1) / 2.0);
  CHECK(v.back() == p * (p + 1) / 2.0);
  made[0].native_barrier(until);
}

TYPE_TO_STRING_AS("shm", shm_env);
#define DISTCOMM_SUITE_ENVS shm_env
#include "suite.hpp"

int main(int argc, char** argv) {
  const distcomm::config cfg = distcomm::config::from_env();
  const distcomm::job j = distcomm::bootstrap(cfg);
  the_job = &j;
  the_options.timeout = cfg.timeout;
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
