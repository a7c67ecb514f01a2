// cuda::host_staged<gloo_backend>: two processes on one GPU (device 0), where NCCL refuses to run.
// Allreduce sum and avg of f32, f16 and i32 tensors of odd counts, through strategy::native
// (staged whole-buffer, gloo's allreduce) and strategy::ring (staged sends and receives, CUDA
// reductions), and a grouped allreduce through cuda::fusion; each rank checks bit for bit
// against the host reference, which it computes from both ranks' (deterministic) inputs.
// Run as `test_cuda_host_staged --launch <distcomm-run>`: without a CUDA device it prints why and
// exits 77 (skipped); otherwise it starts itself as two ranks under distcomm-run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/backends/gloo.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/cuda/fusion.hpp"
#include "distcomm/cuda/host_staged.hpp"
#include "distcomm/fusion/none.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace dc = distcomm;

namespace {

const dc::job* the_job = nullptr;
dc::config the_config;

void cuda_ok(cudaError_t e) { REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e)); }

// Rank r's input: small values (sums stay exact in f16), negative ones too (i32 avg truncates
// toward zero), different per rank.
std::vector<unsigned char> input(dc::dtype t, std::size_t count, int rank) {
  std::vector<unsigned char> out(count * dc::dtype_size(t));
  for (std::size_t i = 0; i < count; ++i) {
    const int k = static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 5) % 23) - 11;
    unsigned char* d = out.data() + i * dc::dtype_size(t);
    if (t == dc::dtype::f16) {
      const dc::f16 h(static_cast<float>(k) * 0.375f);
      std::memcpy(d, &h, 2);
    } else if (t == dc::dtype::f32) {
      const float f = static_cast<float>(k) * 0.1f;  // sums round: both ranks must agree
      std::memcpy(d, &f, 4);
    } else {
      const std::int32_t v = k * 3 + rank;
      std::memcpy(d, &v, 4);
    }
  }
  return out;
}

// What every rank must hold: the rank-ordered fold of all inputs, divided for avg.
std::vector<unsigned char> reference(dc::dtype t, std::size_t count, dc::reduce_op op, int size) {
  std::vector<std::vector<unsigned char>> inputs;
  std::vector<const void*> in;
  for (int r = 0; r < size; ++r) inputs.push_back(input(t, count, r));
  for (const auto& v : inputs) in.push_back(v.data());
  std::vector<unsigned char> want(count * dc::dtype_size(t));
  dc::fold(want.data(), in.data(), in.size(), count, t, op);
  if (op == dc::reduce_op::avg) {
    dc::divide(want.data(), want.data(), count, t, static_cast<std::size_t>(size));
  }
  return want;
}

class device_buffer {
 public:
  explicit device_buffer(std::size_t bytes) { cuda_ok(cudaMalloc(&p_, bytes + 8)); }
  ~device_buffer() { cudaFree(p_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }

 private:
  void* p_ = nullptr;
};

std::vector<unsigned char> to_host(const void* d, std::size_t bytes) {
  std::vector<unsigned char> h(bytes);
  cuda_ok(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

using staged = dc::cuda::host_staged<dc::gloo_backend>;

staged make_backend() {
  dc::gloo_options o;
  o.timeout = the_config.timeout;
  return staged(dc::gloo_backend(*the_job, o), 0, the_config.timeout);
}

template <class S>
void allreduce_exact() {
  dc::config c = the_config;
  c.segment_bytes = 1000;  // ring: several segments per rank at the larger counts
  dc::communicator<staged, S, dc::fusion::none> comm(make_backend(), c);
  const int p = comm.size();
  REQUIRE(p == 2);
  for (dc::dtype t : {dc::dtype::f32, dc::dtype::f16, dc::dtype::i32}) {
    const std::size_t es = dc::dtype_size(t);
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}, std::size_t{30001}}) {
      for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
        CAPTURE(dc::to_string(t));
        CAPTURE(n);
        CAPTURE(dc::to_string(op));
        const auto mine = input(t, n, comm.rank());
        const auto want = reference(t, n, op, p);
        device_buffer in(n * es), out(n * es);
        cuda_ok(cudaMemcpy(in.get(), mine.data(), n * es, cudaMemcpyHostToDevice));
        cuda_ok(cudaMemset(out.get(), 0, n * es));
        comm.allreduce(dc::cuda_view(in.get(), n, t, 0), dc::cuda_view(out.get(), n, t, 0), op);
        CHECK(to_host(out.get(), n * es) == want);
        CHECK(to_host(in.get(), n * es) == mine);              // the input is only read
        comm.allreduce(dc::cuda_view(in.get(), n, t, 0), op);  // in place
        CHECK(to_host(in.get(), n * es) == want);
      }
    }
  }
  comm.barrier();
}

}  // namespace

TEST_CASE("host_staged<gloo>: allreduce through strategy native") {
  allreduce_exact<dc::strategy::native>();
}

TEST_CASE("host_staged<gloo>: allreduce through strategy ring") {
  allreduce_exact<dc::strategy::ring>();
}

TEST_CASE("host_staged<gloo>: grouped allreduce through cuda::fusion") {
  dc::config c = the_config;
  c.fusion_threshold = 16 << 10;
  dc::communicator<staged, dc::strategy::native, dc::cuda::fusion> comm(make_backend(), c);
  const dc::dtype types[] = {dc::dtype::f32, dc::dtype::f16, dc::dtype::i32};
  std::vector<std::size_t> counts;
  std::vector<dc::tensor_view> views;
  std::vector<std::unique_ptr<device_buffer>> buffers;
  for (std::size_t i = 0; i < 40; ++i) {
    const dc::dtype t = types[i % 3];
    const std::size_t n = i == 5 ? 9001 : (i * 37) % 301 + 1;  // i == 5: past the threshold
    buffers.push_back(std::make_unique<device_buffer>(n * dc::dtype_size(t)));
    views.push_back(dc::cuda_view(buffers.back()->get(), n, t, 0));
  }
  for (dc::reduce_op op : {dc::reduce_op::sum, dc::reduce_op::avg}) {
    CAPTURE(dc::to_string(op));
    for (const dc::tensor_view& v : views) {
      const auto mine = input(v.type, v.count, comm.rank());
      cuda_ok(cudaMemcpy(v.data, mine.data(), mine.size(), cudaMemcpyHostToDevice));
    }
    comm.allreduce(dc::span<const dc::tensor_view>(views.data(), views.size()), op);
    for (const dc::tensor_view& v : views) {
      CAPTURE(v.count);
      CHECK(to_host(v.data, v.bytes()) == reference(v.type, v.count, op, comm.size()));
    }
  }
  CHECK(comm.fusion().capacity() > 0);
}

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device: %s\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  if (argc == 3 && std::string(argv[1]) == "--launch") {
    // Two ranks of this program, both on device 0, under distcomm-run (which bounds the job).
    execl(argv[2], argv[2], "-np", "2", "--timeout", "120", argv[0], static_cast<char*>(nullptr));
    std::perror("test_cuda_host_staged: cannot start distcomm-run");
    return 1;
  }
  the_config = dc::config::from_env();
  const dc::job j = dc::bootstrap(the_config);
  the_job = &j;
  doctest::Context ctx(argc, argv);  // every rank reports its own failures
  return ctx.run();
}
