// cuda::host_staged<B>: CUDA tensors over a host-memory backend B (gloo, mpi, ucx, local), for
// jobs where NCCL cannot run, e.g. two processes sharing one GPU. It moves device memory
// (moves_device_memory) through pinned host staging buffers:
//  * isend copies device -> staging (waited, so B sends finished data) and posts B's send;
//  * irecv posts B's receive into staging; once it completed, the request copies staging ->
//    device and completes when that copy has;
//  * the native collectives B has are offered too: the whole buffer goes to the host, B's
//    collective runs there, the result comes back;
//  * memory() runs the CUDA kernels on this backend's stream, so strategy::ring, tree,
//    parameter_server and recursive_doubling work over it, and cuda::fusion packs for it.
// Every wait polls a CUDA event against a deadline (timeout_error past it); copies enqueued but
// not complete when a request is destroyed are waited for there, as they read or write buffers
// the request owns. Messages keep B's matching order: B's operations are posted in call order.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm::cuda {

namespace detail {

class staging;

// A pinned host buffer lent by a staging pool, returned to it on destruction.
class staging_buffer {
 public:
  staging_buffer() = default;
  staging_buffer(staging_buffer&& o) noexcept { swap(o); }
  staging_buffer& operator=(staging_buffer&& o) noexcept {
    staging_buffer(std::move(o)).swap(*this);
    return *this;
  }
  staging_buffer(const staging_buffer&) = delete;
  staging_buffer& operator=(const staging_buffer&) = delete;
  ~staging_buffer();

  unsigned char* data() const noexcept { return data_; }

 private:
  friend class staging;
  void swap(staging_buffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(capacity_, o.capacity_);
  }
  std::shared_ptr<staging> owner_;
  unsigned char* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// A host-to-device copy enqueued on a staging stream and the event it completes on. Destroying a
// pending one waits for the copy (a bounded DMA of host memory), which reads a staging buffer
// about to go back to the pool.
class device_copy {
 public:
  device_copy() = default;
  device_copy(device_copy&& o) noexcept
      : event_(std::exchange(o.event_, nullptr)), pending_(std::exchange(o.pending_, false)) {}
  device_copy& operator=(device_copy&& o) noexcept {
    device_copy(std::move(o)).swap(*this);
    return *this;
  }
  device_copy(const device_copy&) = delete;
  device_copy& operator=(const device_copy&) = delete;
  ~device_copy();

  bool started() const noexcept { return event_ != nullptr; }
  void start(staging& s, void* dst, const void* src, std::size_t bytes);
  bool done();

 private:
  void swap(device_copy& o) noexcept {
    std::swap(event_, o.event_);
    std::swap(pending_, o.pending_);
  }
  cudaEvent_t event_ = nullptr;
  bool pending_ = false;
};

// The device side of a host_staged backend, shared by it and its requests: device, stream,
// pinned staging pool, and the scratch buffers of the memory operations.
class staging : public std::enable_shared_from_this<staging> {
 public:
  // Unset timeout: DISTCOMM_TIMEOUT (config::from_env().timeout).
  staging(int device, std::optional<std::chrono::duration<double>> timeout);
  ~staging();
  staging(const staging&) = delete;
  staging& operator=(const staging&) = delete;

  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_; }
  void set_stream(cudaStream_t s) noexcept { stream_ = s; }
  std::chrono::duration<double> timeout() const noexcept { return timeout_; }
  void use_device() const;

  // At least `bytes` (one at least) of pinned host memory, from the pool.
  staging_buffer borrow(std::size_t bytes);
  // Copies device -> host and device <- host on the stream, waiting until `until`.
  void to_host(void* host, const void* dev, std::size_t bytes, deadline until, const char* what);
  void to_device(void* dev, const void* host, std::size_t bytes, deadline until, const char* what);
  // Returns once the stream has run everything enqueued so far; timeout_error past `until`.
  void complete(deadline until, const char* what);

  // The memory operations (backend.hpp) on the stream.
  void copy(void* dst, const void* src, std::size_t bytes);
  void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
            reduce_op op);
  unsigned char* scratch(std::size_t bytes);

 private:
  friend class staging_buffer;
  void give_back(unsigned char* data, std::size_t capacity) noexcept;

  int device_;
  std::chrono::duration<double> timeout_;
  cudaStream_t own_stream_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t complete_event_ = nullptr;
  std::mutex pool_mutex_;  // requests may be destroyed on other threads
  std::vector<std::pair<unsigned char*, std::size_t>> free_;  // pinned buffers not lent out
  void* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
  void* fold_acc_ = nullptr;
  std::size_t fold_acc_bytes_ = 0;
};

[[noreturn]] void staged_timeout(const std::string& what);

}  // namespace detail

// The memory operations of host_staged (backend.hpp): copies and the kernels of
// cuda/kernels.hpp on the backend's stream. A handle: copies share the backend's state.
class staged_memory {
 public:
  explicit staged_memory(detail::staging* s) noexcept : s_(s) {}
  void copy(void* dst, const void* src, std::size_t bytes) { s_->copy(dst, src, bytes); }
  void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op);
  void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor);
  void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
            reduce_op op) {
    s_->fold(dst, in, n, count, t, op);
  }
  unsigned char* scratch(std::size_t bytes) { return s_->scratch(bytes); }
  void complete(deadline until) { s_->complete(until, "host_staged: device work"); }

 private:
  detail::staging* s_;
};

// A send or receive of host_staged<B>. Empty (default-constructed) means complete.
template <class Request>
class [[nodiscard]] staged_request {
 public:
  staged_request() = default;
  staged_request(std::shared_ptr<detail::staging> s, detail::staging_buffer buffer, Request inner,
                 void* device_dst, std::size_t bytes)
      : s_(std::move(s)),
        buffer_(std::move(buffer)),
        inner_(std::move(inner)),
        device_dst_(device_dst),
        bytes_(bytes),
        pending_(true) {}

  bool test() {
    if (!pending_) return true;
    if (!copy_.started()) {
      if (!inner_.test()) return false;
      if (device_dst_ == nullptr || bytes_ == 0) return finish();  // a send, or nothing to copy
      copy_.start(*s_, device_dst_, buffer_.data(), bytes_);
    }
    return copy_.done() && finish();
  }

  void wait(deadline until) {
    if (!pending_) return;
    inner_.wait(until);  // B's own deadline and errors
    while (!test()) {
      if (clock::now() >= until) {
        detail::staged_timeout("host_staged: copying " + std::to_string(bytes_) +
                               " received bytes to the device");
      }
      std::this_thread::yield();
    }
  }

 private:
  bool finish() {
    pending_ = false;
    return true;
  }

  std::shared_ptr<detail::staging> s_;
  detail::staging_buffer buffer_;  // outlives inner_ and copy_, which use it
  Request inner_;
  detail::device_copy copy_;
  void* device_dst_ = nullptr;  // null for a send
  std::size_t bytes_ = 0;
  bool pending_ = false;
};

template <class B>
class host_staged {
 public:
  using request = staged_request<typename B::request>;
  static constexpr const char* name = "host_staged";
  static constexpr bool moves_device_memory = true;
  static constexpr bool native_is_deterministic =
      distcomm::detail::native_is_deterministic<B>::value;
  // One round trip to the host for the whole buffer, then B's own collective, when B has one.
  static constexpr const char* default_algo =
      has_native_allreduce_v<B> ? "native:0-max" : "ring:0-max";

  // Wraps `inner`; tensors live on CUDA device `device`. `timeout` bounds the staging copy of a
  // send (isend has no deadline) and teardown. Unset: DISTCOMM_TIMEOUT.
  host_staged(B inner, int device,
              std::optional<std::chrono::duration<double>> timeout = std::nullopt)
      : inner_(std::move(inner)), s_(std::make_shared<detail::staging>(device, timeout)) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  int device() const noexcept { return s_->device(); }
  B& inner() noexcept { return inner_; }
  // The stream of the copies and the memory operations: a blocking stream of this backend,
  // until set_stream() (e.g. a framework's current stream; not owned).
  cudaStream_t stream() const noexcept { return s_->stream(); }
  void set_stream(cudaStream_t s) noexcept { s_->set_stream(s); }
  staged_memory memory() {
    s_->use_device();
    return staged_memory(s_.get());
  }
  void abort(const std::string& reason) noexcept { inner_.abort(reason); }

  request isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
    detail::staging_buffer buf = s_->borrow(bytes);
    s_->to_host(buf.data(), data, bytes, deadline_after(s_->timeout()), "host_staged: send");
    auto r = inner_.isend(buf.data(), bytes, peer, tag);
    return request(s_, std::move(buf), std::move(r), nullptr, bytes);
  }

  request irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
    detail::staging_buffer buf = s_->borrow(bytes);
    auto r = inner_.irecv(buf.data(), bytes, peer, tag);
    return request(s_, std::move(buf), std::move(r), data, bytes);
  }

  template <class X = B, class = std::enable_if_t<distcomm::detail::has_native_allreduce<X>::value>>
  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until) {
    const std::size_t bytes = count * dtype_size(t);
    detail::staging_buffer buf = s_->borrow(bytes);
    s_->to_host(buf.data(), in, bytes, until, "host_staged: allreduce input");
    inner_.native_allreduce(buf.data(), buf.data(), count, t, op, until);
    s_->to_device(out, buf.data(), bytes, until, "host_staged: allreduce result");
  }

  template <class X = B,
            class = std::enable_if_t<distcomm::detail::has_native_reduce_scatter<X>::value>>
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until) {
    const std::size_t bytes = recv_count * dtype_size(t);
    detail::staging_buffer from = s_->borrow(bytes * static_cast<std::size_t>(size()));
    detail::staging_buffer to = s_->borrow(bytes);
    s_->to_host(from.data(), in, bytes * static_cast<std::size_t>(size()), until,
                "host_staged: reduce_scatter input");
    inner_.native_reduce_scatter(from.data(), to.data(), recv_count, t, op, until);
    s_->to_device(out, to.data(), bytes, until, "host_staged: reduce_scatter result");
  }

  template <class X = B, class = std::enable_if_t<distcomm::detail::has_native_allgather<X>::value>>
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                        deadline until) {
    const std::size_t bytes = send_count * dtype_size(t);
    detail::staging_buffer from = s_->borrow(bytes);
    detail::staging_buffer to = s_->borrow(bytes * static_cast<std::size_t>(size()));
    s_->to_host(from.data(), in, bytes, until, "host_staged: allgather input");
    inner_.native_allgather(from.data(), to.data(), send_count, t, until);
    s_->to_device(out, to.data(), bytes * static_cast<std::size_t>(size()), until,
                  "host_staged: allgather result");
  }

  template <class X = B, class = std::enable_if_t<distcomm::detail::has_native_broadcast<X>::value>>
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until) {
    const std::size_t bytes = count * dtype_size(t);
    detail::staging_buffer buf = s_->borrow(bytes);
    if (rank() == root) s_->to_host(buf.data(), data, bytes, until, "host_staged: broadcast");
    inner_.native_broadcast(buf.data(), count, t, root, until);
    if (rank() != root) s_->to_device(data, buf.data(), bytes, until, "host_staged: broadcast");
  }

  template <class X = B, class = std::enable_if_t<distcomm::detail::has_native_barrier<X>::value>>
  void native_barrier(deadline until) {
    inner_.native_barrier(until);
  }

 private:
  B inner_;
  std::shared_ptr<detail::staging> s_;
};

}  // namespace distcomm::cuda
