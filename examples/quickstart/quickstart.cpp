// distcomm-quickstart: README.md's multi-process program, verbatim from the #include on (a test
// checks that). One rank per process under whatever started it: distcomm-run, mpirun, srun,
// torchrun-style variables or TF_CONFIG.
#include <cstdio>
#include <vector>

#include <distcomm/distcomm.hpp>

int main() try {
  auto comm = distcomm::init();  // DISTCOMM_BACKEND, else the fastest built for this job
  std::vector<float> grad(1 << 20, comm.rank() + 1.0f);
  comm.allreduce(distcomm::view(grad), distcomm::reduce_op::avg);
  const bool ok = grad[0] == (comm.size() + 1) / 2.0f;
  std::printf("rank %d/%d: %s (backend %s, strategy %s)\n", comm.rank(), comm.size(),
              ok ? "ok" : "WRONG", comm.backend_name(), comm.strategy_name());
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "quickstart: %s\n", e.what());  // names the cause and what to do
  return 2;
}
