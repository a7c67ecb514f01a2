// distcomm-bench-nccl: the sweep on the NCCL backend with CUDA device buffers, one GPU per rank
// (local rank modulo the visible devices), bootstrapped through DistComm's store.
//   distcomm-run -np 2 distcomm-bench-nccl -b 8 -e 128M -f 2 [--peer nccl]
// The collectives are the backend's native ones (--strategy native; auto means the same here).
// --peer nccl interleaves ncclAllReduce on a communicator of its own (peer_nccl.cpp).
// Without a CUDA device it says why and exits 77.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "distcomm/backends/nccl.hpp"
#include "distcomm/config.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "driver.hpp"
#include "nccl_comm.hpp"

namespace {

// The options the device runner does not offer yet, refused before anything connects.
void precheck_nccl(const distcomm::bench::options& o) {
  namespace db = distcomm::bench;
  if (o.strategy != "native" && o.strategy != "auto") {
    throw distcomm::invalid_argument_error(
        "--strategy " + o.strategy +
        ": the NCCL benchmark runs NCCL's own collectives only (--strategy native); the "
        "point-to-point strategies do not take device buffers yet");
  }
  if (!o.peer.empty() && o.peer != "nccl") {
    throw distcomm::invalid_argument_error("--peer " + o.peer +
                                           ": that peer reduces host memory; the NCCL benchmark "
                                           "moves device buffers: --peer nccl");
  }
  if (!o.profile_file.empty()) {
    throw distcomm::invalid_argument_error(
        "--profile: not available on the NCCL benchmark yet; use --fusion-tensors K for the "
        "grouped allreduce through the device fusion buffer");
  }
}

}  // namespace

namespace distcomm::bench {
void add_nccl_peer();  // peer_nccl.cpp
}  // namespace distcomm::bench

int main(int argc, char** argv) {
  namespace db = distcomm::bench;
  namespace dc = distcomm;
  const char* program = "distcomm-bench-nccl";
  db::add_nccl_peer();
  db::options o;
  if (const int rc = db::parse_options(argc, argv, {program, false, true}, o); rc >= 0) return rc;
  return db::guarded_main(program, [&] {
    precheck_nccl(o);
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      std::fprintf(stderr, "%s: no CUDA device: %s (one GPU per rank is needed)\n", program,
                   e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
      return 77;
    }
    const dc::config cfg = dc::config::from_env();
    const dc::world_info w = dc::detect_world();
    const int device = w.local_rank % devices;
    db::cuda_check(cudaSetDevice(device), "cudaSetDevice");
    db::process_env env = db::process_env_of(program, w, cfg);
    dc::job j = dc::bootstrap(cfg);
    env.peer.kv = [&] { return j.kv; };
    dc::nccl_backend b(j, device, cfg.timeout);
    return db::runner<db::nccl_comm, db::device_buffer>(std::move(b), o, env).run();
  });
}
