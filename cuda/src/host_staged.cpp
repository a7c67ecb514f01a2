#include "distcomm/cuda/host_staged.hpp"

#include <algorithm>
#include <thread>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/cuda/check.hpp"
#include "distcomm/cuda/kernels.hpp"

namespace distcomm::cuda {
namespace detail {

using distcomm::detail::check_cuda;

namespace {

// Polls the event until it completed; sleeps a little between tries once the first ~100
// microseconds passed, so a waiting rank leaves the cores to the other processes on its GPU.
bool wait_event(cudaEvent_t e, deadline until) {
  const auto start = clock::now();
  for (;;) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaSuccess) return true;
    if (r != cudaErrorNotReady) check_cuda(r, "cudaEventQuery");
    const auto now = clock::now();
    if (now >= until) return false;
    if (now - start < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace

void staged_timeout(const std::string& what) { throw timeout_error(what + " timed out"); }

staging_buffer::~staging_buffer() {
  if (owner_ != nullptr) owner_->give_back(data_, capacity_);
}

device_copy::~device_copy() {
  if (event_ == nullptr) return;
  if (pending_) cudaEventSynchronize(event_);
  cudaEventDestroy(event_);
}

void device_copy::start(staging& s, void* dst, const void* src, std::size_t bytes) {
  s.use_device();
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.stream()),
             "cudaMemcpyAsync");
  check_cuda(cudaEventRecord(event_, s.stream()), "cudaEventRecord");
  pending_ = true;
}

bool device_copy::done() {
  if (!pending_) return true;
  const cudaError_t r = cudaEventQuery(event_);
  if (r == cudaErrorNotReady) return false;
  check_cuda(r, "cudaEventQuery");
  pending_ = false;
  return true;
}

staging::staging(int device, std::optional<std::chrono::duration<double>> timeout)
    : device_(device), timeout_(timeout ? *timeout : config::from_env().timeout) {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (device < 0 || device >= devices) {
    throw invalid_argument_error("host_staged: CUDA device " + std::to_string(device) +
                                 " does not exist (" + std::to_string(devices) + " visible)");
  }
  use_device();
  // A blocking stream: it runs after the work the caller put on the default stream before the
  // call (a cudaMemset of the output, say), as a caller of a blocking collective expects. A
  // non-blocking one let the H2D copy of a result land before such a memset, which then zeroed
  // it (seen on an H100: test_cuda_host_staged's out-of-place checks).
  check_cuda(cudaStreamCreateWithFlags(&own_stream_, cudaStreamDefault),
             "cudaStreamCreateWithFlags");
  stream_ = own_stream_;
  check_cuda(cudaEventCreateWithFlags(&complete_event_, cudaEventDisableTiming), "cudaEventCreate");
}

staging::~staging() {
  cudaSetDevice(device_);
  // Work still on the stream may use the buffers below; bounded by the timeout, as NCCL's
  // teardown is.
  if (cudaEventRecord(complete_event_, stream_) == cudaSuccess) {
    wait_event(complete_event_, deadline_after(timeout_));
  }
  for (auto& b : free_) cudaFreeHost(b.first);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (fold_acc_ != nullptr) cudaFree(fold_acc_);
  cudaEventDestroy(complete_event_);
  if (own_stream_ != nullptr) cudaStreamDestroy(own_stream_);
}

void staging::use_device() const { check_cuda(cudaSetDevice(device_), "cudaSetDevice"); }

staging_buffer staging::borrow(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1);
  staging_buffer b;
  std::unique_lock<std::mutex> lock(pool_mutex_);
  // The smallest free buffer that fits: a ring's segments and a collective's whole buffer are
  // then served by buffers of their own sizes.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best != free_.end()) {
    b.data_ = best->first;
    b.capacity_ = best->second;
    free_.erase(best);
  } else {
    lock.unlock();
    use_device();
    void* p = nullptr;
    check_cuda(cudaMallocHost(&p, bytes), "cudaMallocHost");
    b.data_ = static_cast<unsigned char*>(p);
    b.capacity_ = bytes;
  }
  b.owner_ = shared_from_this();
  return b;
}

void staging::give_back(unsigned char* data, std::size_t capacity) noexcept {
  try {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    free_.emplace_back(data, capacity);
  } catch (...) {
    cudaFreeHost(data);
  }
}

void staging::to_host(void* host, const void* dev, std::size_t bytes, deadline until,
                      const char* what) {
  if (bytes == 0) return;
  use_device();
  check_cuda(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
  complete(until, what);
}

void staging::to_device(void* dev, const void* host, std::size_t bytes, deadline until,
                        const char* what) {
  if (bytes == 0) return;
  use_device();
  check_cuda(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  complete(until, what);
}

void staging::complete(deadline until, const char* what) {
  check_cuda(cudaEventRecord(complete_event_, stream_), "cudaEventRecord");
  if (!wait_event(complete_event_, until)) {
    staged_timeout(std::string(what) + " on CUDA device " + std::to_string(device_));
  }
}

void staging::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
             "cudaMemcpyAsync");
}

namespace {

// Grows a device buffer to at least `bytes`. It is asked for at the start of a collective, so
// the old buffer is idle; the stream is waited for anyway (bounded) before it is freed.
void* grow(staging& s, void*& buffer, std::size_t& capacity, std::size_t bytes) {
  if (bytes > capacity) {
    if (buffer != nullptr) {
      s.complete(deadline_after(s.timeout()), "host_staged: growing scratch space");
      check_cuda(cudaFree(buffer), "cudaFree");
      buffer = nullptr;
      capacity = 0;
    }
    check_cuda(cudaMalloc(&buffer, bytes), "cudaMalloc");
    capacity = bytes;
  }
  return buffer;
}

}  // namespace

void staging::fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
                   reduce_op op) {
  void* acc = n > 2 && count != 0 ? grow(*this, fold_acc_, fold_acc_bytes_, count * dtype_size(t))
                                  : nullptr;
  cuda::fold(dst, in, n, count, t, op, acc, stream_);
}

unsigned char* staging::scratch(std::size_t bytes) {
  return static_cast<unsigned char*>(grow(*this, scratch_, scratch_bytes_, bytes));
}

}  // namespace detail

void staged_memory::combine(void* dst, const void* a, const void* b, std::size_t count, dtype t,
                            reduce_op op) {
  cuda::combine(dst, a, b, count, t, op, s_->stream());
}

void staged_memory::divide(void* dst, const void* src, std::size_t count, dtype t,
                           std::size_t divisor) {
  cuda::divide(dst, src, count, t, divisor, s_->stream());
}

}  // namespace distcomm::cuda
