// --peer nccl (distcomm-bench-nccl only): ncclAllReduce on a communicator of its own over the same
// ranks and GPUs, in place on the runner's device buffer, on a stream of its own, waited for before
// it returns, as the backend's collectives are: what DistComm's native allreduce costs over the
// raw call, measured in the same process, interleaved.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "distcomm/backends/nccl.hpp"
#include "distcomm/core/error.hpp"
#include "peer.hpp"

namespace distcomm::bench {

namespace {

void nccl_ok(ncclResult_t r, const char* routine) {
  if (r != ncclSuccess) {
    throw error(std::string("--peer nccl: ") + routine + " failed: " + ncclGetErrorString(r));
  }
}

void cuda_ok(cudaError_t e, const char* routine) {
  if (e != cudaSuccess) {
    throw error(std::string("--peer nccl: ") + routine + " failed: " + cudaGetErrorString(e));
  }
}

class nccl_peer final : public peer {
 public:
  explicit nccl_peer(const peer_world& w) {
    const bytes id = detail::share_from_rank0(*w.kv(), w.rank, "distcomm-bench/peer-nccl-id",
                                              sizeof(ncclUniqueId), [] {
                                                ncclUniqueId u;
                                                nccl_ok(ncclGetUniqueId(&u), "ncclGetUniqueId");
                                                bytes b(sizeof u);
                                                std::memcpy(b.data(), &u, sizeof u);
                                                return b;
                                              });
    ncclUniqueId u;
    std::memcpy(&u, id.data(), sizeof u);
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    nccl_ok(ncclCommInitRank(&comm_, w.size, u, w.rank), "ncclCommInitRank");
  }
  ~nccl_peer() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  nccl_peer(const nccl_peer&) = delete;
  nccl_peer& operator=(const nccl_peer&) = delete;

  void allreduce(void* data, std::size_t count, dtype t, reduce_op op) override {
    bool divide_after = false;
    const ncclRedOp_t nop = detail::nccl_redop(op, t, &divide_after);
    if (divide_after) {
      throw invalid_argument_error("--peer nccl: NCCL has no avg of " + std::string(to_string(t)) +
                                   " that rounds as DistComm's does; use --op sum");
    }
    nccl_ok(ncclAllReduce(data, data, count, detail::nccl_datatype(t), nop, comm_, stream_),
            "ncclAllReduce");
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  std::string description() const override {
    return "ncclAllReduce in place, on a communicator and stream of its own";
  }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

void add_nccl_peer() {
  add_peer({"nccl",
            [](const peer_world& w) {
              if (!w.kv) throw invalid_argument_error("--peer nccl needs the job's store");
            },
            [](const peer_world& w) { return std::unique_ptr<peer>(new nccl_peer(w)); }});
}

}  // namespace distcomm::bench
