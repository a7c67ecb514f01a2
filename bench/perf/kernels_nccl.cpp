// distcomm-bench-nccl-kernels: device memory bandwidth of DistComm's CUDA kernels against
// cudaMemcpy device-to-device in the same run: f32 sum (c = a + b, 3N bytes), batched pack of 64
// tensors with and without scaling, and the copy (2N bytes each). Medians of --reps, CUDA events.
//   distcomm-bench-nccl-kernels [--mib 256] [--reps 21]
#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "distcomm/cuda/kernels.hpp"

namespace {

void ok(cudaError_t e) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "distcomm-bench-nccl-kernels: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of `reps` timed runs of f, after one untimed run.
double median_ms(int reps, const std::function<void()>& f) {
  cudaEvent_t start, stop;
  ok(cudaEventCreate(&start));
  ok(cudaEventCreate(&stop));
  f();
  std::vector<float> ms(static_cast<std::size_t>(reps));
  for (float& m : ms) {
    ok(cudaEventRecord(start));
    f();
    ok(cudaEventRecord(stop));
    ok(cudaEventSynchronize(stop));
    ok(cudaEventElapsedTime(&m, start, stop));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[static_cast<std::size_t>(reps / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Bandwidth of DistComm's CUDA kernels vs cudaMemcpy device-to-device"};
  std::size_t mib = 256;
  int reps = 21;
  app.add_option("--mib", mib, "MiB per array")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed repetitions (median reported)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 77;
  }
  const std::size_t bytes = mib << 20;
  const std::size_t n = bytes / sizeof(float);
  void *a, *b, *c;
  ok(cudaMalloc(&a, bytes));
  ok(cudaMalloc(&b, bytes));
  ok(cudaMalloc(&c, bytes));
  ok(cudaMemset(a, 0, bytes));
  ok(cudaMemset(b, 0, bytes));
  // 64 equal tensors cut from `a`, packed into `c`.
  constexpr std::size_t tensors = 64;
  std::vector<distcomm::cuda::copy_segment> segs;
  for (std::size_t i = 0; i < tensors; ++i) {
    const std::size_t each = n / tensors;
    segs.push_back({static_cast<float*>(a) + i * each, each, i * each});
  }
  const double gb = static_cast<double>(bytes) / 1e9;
  const auto report = [&](const char* what, double moved, double ms) {
    std::printf("%-34s %8.3f ms %8.1f GB/s\n", what, ms, moved * gb / (ms / 1e3));
  };
  report("cudaMemcpy device-to-device", 2,
         median_ms(reps, [&] { ok(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); }));
  report("cuda::combine f32 sum (c = a + b)", 3, median_ms(reps, [&] {
           distcomm::cuda::combine(c, a, b, n, distcomm::dtype::f32, distcomm::reduce_op::sum,
                                   nullptr);
         }));
  report("cuda::pack f32, 64 tensors", 2, median_ms(reps, [&] {
           distcomm::cuda::pack(segs.data(), segs.size(), c, distcomm::dtype::f32, 1.0, nullptr);
         }));
  report("cuda::pack f32, 64 tensors, x0.5", 2, median_ms(reps, [&] {
           distcomm::cuda::pack(segs.data(), segs.size(), c, distcomm::dtype::f32, 0.5, nullptr);
         }));
  report("cuda::unpack f32, 64 tensors, x2", 2, median_ms(reps, [&] {
           distcomm::cuda::unpack(segs.data(), segs.size(), c, distcomm::dtype::f32, 2.0, nullptr);
         }));
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
