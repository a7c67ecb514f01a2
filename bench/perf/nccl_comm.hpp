// What distcomm-bench-nccl gives the driver (driver.hpp) in place of distcomm::communicator and
// host_buffer: the NCCL backend's native collectives on CUDA device buffers. The communicator does
// not take device tensors, so the collectives are called on the backend directly; the runner's
// control data (device lines, times, wrong-element counts) lives in host memory and is staged
// through a device scratch buffer. Every collective waits for its CUDA event before returning, so
// the runner's wall-clock timing covers the whole collective.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/backends/nccl.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/cuda/fusion.hpp"
#include "distcomm/strategy/native.hpp"

namespace distcomm::bench {

inline void cuda_check(cudaError_t e, const char* routine) {
  if (e != cudaSuccess) {
    throw error(std::string(routine) + " failed: " + cudaGetErrorString(e));
  }
}

inline int current_device() {
  int d = -1;
  cuda_check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

// cudaMalloc'd memory, zeroed. The runner fills and checks it through a host staging copy. Copies
// and memsets run on the legacy default stream and are synchronised with the whole device, because
// the collectives run on the backend's non-blocking stream, which the legacy stream does not order.
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t bytes) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
    data_.reset(static_cast<unsigned char*>(p));
    zero(p, bytes);
  }
  unsigned char* get() const noexcept { return data_.get(); }

  static tensor_view view(void* data, std::size_t count, dtype t) {
    return tensor_view{data, count, t, memory_kind::cuda, current_device()};
  }
  static void zero(void* p, std::size_t bytes) {
    cuda_check(cudaMemset(p, 0, bytes), "cudaMemset");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  void fill_input(const data_check& dc, void* p, std::size_t first, std::size_t count) {
    dc.fill_input(stage(dc, count), first, count);
    upload(p);
  }
  void fill_sentinel(const data_check& dc, void* p, std::size_t count) {
    dc.fill_sentinel(stage(dc, count), count);
    upload(p);
  }
  std::int64_t wrong(const data_check& dc, const void* p, std::size_t first, std::size_t count) {
    unsigned char* h = stage(dc, count);
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda_check(cudaMemcpy(h, p, staging_.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return dc.wrong(h, first, count);
  }

 private:
  unsigned char* stage(const data_check& dc, std::size_t count) {
    staging_.assign(count * dtype_size(dc.type()), 0);
    return staging_.data();
  }
  void upload(void* p) {
    cuda_check(cudaMemcpy(p, staging_.data(), staging_.size(), cudaMemcpyHostToDevice),
               "cudaMemcpy");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  struct free_deleter {
    void operator()(unsigned char* p) const noexcept { cudaFree(p); }
  };
  std::unique_ptr<unsigned char, free_deleter> data_;
  std::vector<unsigned char> staging_;
};

// The members of distcomm::communicator the runner calls, on nccl_backend's native collectives
// (strategy::native's calls, without the communicator's host-memory checks). Views in CUDA memory
// go to NCCL as they are; views in host memory are staged through device scratch memory.
class nccl_comm {
 public:
  using backend_type = nccl_backend;
  using strategy_type = strategy::native;

  explicit nccl_comm(nccl_backend b, config cfg = config::from_env())
      : b_(std::move(b)), cfg_(std::move(cfg)), fusion_(cfg_.fusion_threshold) {}

  int rank() const { return b_.rank(); }
  int size() const { return b_.size(); }
  const config& settings() const noexcept { return cfg_; }
  static const char* backend_name() { return nccl_backend::name; }
  static const char* strategy_name() { return "native"; }

  void allreduce(tensor_view data, reduce_op op) { allreduce(data, data, op); }
  void allreduce(tensor_view in, tensor_view out, reduce_op op) {
    on_device(in, out, [&](const void* i, void* o) {
      b_.native_allreduce(i, o, in.count, in.type, op, until());
    });
  }
  // Grouped, through the device fusion buffer on the backend's stream; waited as a whole.
  void allreduce(span<const tensor_view> tensors, reduce_op op) {
    const deadline by = until();
    std::vector<nccl_request> pending;
    fusion_.allreduce(
        tensors, op, b_.stream(), 1.0, 1.0,
        [&](const void* i, void* o, std::size_t count, dtype t, reduce_op rop, cudaStream_t s) {
          pending.push_back(b_.iallreduce(i, o, count, t, rop, s));
        });
    for (nccl_request& r : pending) r.wait(by);
    // The last group's unpack follows its allreduce on the stream.
    cuda_check(cudaStreamSynchronize(b_.stream()), "cudaStreamSynchronize");
  }
  void reduce_scatter(tensor_view in, tensor_view out, reduce_op op) {
    on_device(in, out, [&](const void* i, void* o) {
      b_.native_reduce_scatter(i, o, out.count, out.type, op, until());
    });
  }
  void allgather(tensor_view in, tensor_view out) {
    on_device(in, out, [&](const void* i, void* o) {
      b_.native_allgather(i, o, in.count, in.type, until());
    });
  }
  void broadcast(tensor_view data, int root) {
    on_device(data, data, [&](const void*, void* o) {
      b_.native_broadcast(o, data.count, data.type, root, until());
    });
  }
  void barrier() { b_.native_barrier(until()); }
  // NCCL has no alltoall of its own: strategy::native's pairwise exchange over its send/receive,
  // round by round.
  void alltoall(tensor_view in, tensor_view out) {
    on_device(in, out, [&](const void* i, void* o) {
      native_.alltoall(b_, i, o, in.count / static_cast<std::size_t>(size()), in.type, until());
    });
  }
  // The same exchange with per-rank counts and displacements (the driver gives all four).
  void alltoallv(tensor_view in, span<const std::size_t> send_counts, tensor_view out,
                 span<const std::size_t> recv_counts, span<const std::size_t> send_displs,
                 span<const std::size_t> recv_displs) {
    on_device(in, out, [&](const void* i, void* o) {
      native_.alltoallv(b_, i, send_counts.data(), send_displs.data(), o, recv_counts.data(),
                        recv_displs.data(), in.type, until());
    });
  }

 private:
  deadline until() const { return deadline_after(cfg_.timeout); }

  template <class F>
  void on_device(const tensor_view& in, const tensor_view& out, F&& run) {
    if (in.memory == memory_kind::cuda && out.memory == memory_kind::cuda) {
      run(in.data, out.data);
      return;
    }
    if (in.memory != memory_kind::host || out.memory != memory_kind::host) {
      throw invalid_argument_error("distcomm-bench-nccl: a collective mixing host and CUDA views");
    }
    const bool in_place = in.data == out.data;
    const std::size_t in_bytes = (in.bytes() + 255) / 256 * 256;  // NCCL likes aligned buffers
    if (scratch_capacity_ < in_bytes + out.bytes()) {
      scratch_ = device_buffer(in_bytes + out.bytes());
      scratch_capacity_ = in_bytes + out.bytes();
    }
    unsigned char* d_in = scratch_.get();
    unsigned char* d_out = in_place ? d_in : d_in + in_bytes;
    cuda_check(cudaMemcpy(d_in, in.data, in.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    run(d_in, d_out);
    cuda_check(cudaMemcpy(out.data, d_out, out.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

  nccl_backend b_;
  config cfg_;
  cuda::fusion_buffer fusion_;
  strategy::native native_{cfg_};
  device_buffer scratch_;  // host views' staging
  std::size_t scratch_capacity_ = 0;
};

}  // namespace distcomm::bench
