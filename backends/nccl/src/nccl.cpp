#include "distcomm/backends/nccl.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/cuda/kernels.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"
#include "errors.hpp"

namespace distcomm {
namespace detail {

ncclDataType_t nccl_datatype(dtype t) {
  switch (t) {
    case dtype::f16:
      return ncclFloat16;
    case dtype::bf16:
      return ncclBfloat16;
    case dtype::f32:
      return ncclFloat32;
    case dtype::f64:
      return ncclFloat64;
    case dtype::i8:
      return ncclInt8;
    case dtype::u8:
      return ncclUint8;
    case dtype::i32:
      return ncclInt32;
    case dtype::i64:
      return ncclInt64;
  }
  throw invalid_argument_error("nccl: invalid dtype value " + std::to_string(static_cast<int>(t)));
}

ncclRedOp_t nccl_redop(reduce_op op, dtype t, bool* divide_after) {
  nccl_datatype(t);  // validates t
  *divide_after = false;
  switch (op) {
    case reduce_op::sum:
      return ncclSum;
    case reduce_op::prod:
      return ncclProd;
    case reduce_op::min:
      return ncclMin;
    case reduce_op::max:
      return ncclMax;
    case reduce_op::avg:
      if (is_floating_point(t)) return ncclAvg;
      *divide_after = true;
      return ncclSum;
  }
  throw invalid_argument_error("nccl: invalid reduce_op value " +
                               std::to_string(static_cast<int>(op)));
}

bytes share_from_rank0(store& kv, int rank, const std::string& key, std::size_t expected_bytes,
                       const std::function<bytes()>& make) {
  if (rank == 0) {
    bytes value = make();
    kv.set(key, value);
    return value;
  }
  bytes value = kv.get(key);
  if (value.size() != expected_bytes) {
    throw rendezvous_error("nccl: store key '" + key + "' holds " + std::to_string(value.size()) +
                           " bytes, expected " + std::to_string(expected_bytes) +
                           " (an NCCL unique id); is another program using the same store?");
  }
  return value;
}

// Polls fn (one short call) until it returns true; sleeps a little between tries once the first
// ~100 microseconds passed, so a waiting rank leaves the cores to others. False at the deadline.
template <class F>
bool poll_until(deadline until, F&& fn) {
  const auto start = clock::now();
  for (;;) {
    if (fn()) return true;
    const auto now = clock::now();
    if (now >= until) return false;
    if (now - start < std::chrono::microseconds(100)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

struct nccl_group {
  cudaEvent_t event = nullptr;
  bool issued = false;  // p2p groups are queued until first tested or waited on
  bool done = false;
  ~nccl_group() {
    if (event != nullptr) cudaEventDestroy(event);  // released once the event completes
  }
};

struct nccl_state {
  ncclComm_t comm = nullptr;
  bool owned = true;
  int rank = 0;
  int size = 1;
  int device = 0;
  cudaStream_t own_stream = nullptr;
  cudaStream_t stream = nullptr;
  std::chrono::duration<double> timeout{300};
  void* barrier_scratch = nullptr;  // one int on the device
  // nccl_memory's buffers: the strategies' scratch and the accumulator of fold.
  void* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  void* fold_acc = nullptr;
  std::size_t fold_acc_bytes = 0;
  void* host_staging = nullptr;  // host_allgather's
  std::size_t host_staging_bytes = 0;
  cudaEvent_t complete_event = nullptr;  // nccl_memory::complete
  // The job's store (a backend made from a job) and this backend's keys in it: group_store().
  std::shared_ptr<store> kv;
  std::string prefix;

  std::mutex mutex;  // guards the fields below
  std::atomic<bool> aborted{false};
  std::string abort_reason;

  struct queued_p2p {
    bool is_send;
    void* data;
    std::size_t bytes;
    int peer;
  };
  std::vector<queued_p2p> queued;
  std::shared_ptr<nccl_group> open_group;  // what the queued operations complete on

  ~nccl_state() {
    cudaSetDevice(device);
    if (barrier_scratch != nullptr) cudaFree(barrier_scratch);
    if (scratch != nullptr) cudaFree(scratch);
    if (host_staging != nullptr) cudaFree(host_staging);
    if (fold_acc != nullptr) cudaFree(fold_acc);
    if (complete_event != nullptr) cudaEventDestroy(complete_event);
    if (owned && comm != nullptr && !aborted) {
      // Finalize flushes NCCL's outstanding work; bounded, then destroy (or abort on timeout).
      ncclCommFinalize(comm);
      const bool clean = poll_until(deadline_after(timeout), [&] {
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(comm, &r);
        return r != ncclInProgress;
      });
      if (clean) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    if (own_stream != nullptr) cudaStreamDestroy(own_stream);
  }

  void use_device() const { check_cuda(cudaSetDevice(device), "cudaSetDevice"); }

  [[noreturn]] void throw_aborted(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    throw peer_lost_error("nccl: " + what + " on rank " + std::to_string(rank) +
                          " failed: the communicator was aborted: " + abort_reason);
  }

  void do_abort(const std::string& reason) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (aborted.exchange(true)) return;
      abort_reason = reason;
    }
    if (owned && comm != nullptr) {
      cudaSetDevice(device);
      ncclCommAbort(comm);  // ends NCCL's kernels; the communicator is freed
    }
  }

  // The asynchronous error state: throws on an error (after aborting), true once not in progress.
  bool settled(const char* routine) {
    ncclResult_t r = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm, &r);
    if (q != ncclSuccess) r = q;
    if (r == ncclSuccess) return true;
    if (r == ncclInProgress) return false;
    const std::string what = describe_nccl(r, routine, comm);
    try {
      check_nccl(r, routine, comm);
    } catch (...) {
      do_abort("nccl: " + what);
      throw;
    }
    return true;
  }

  // After an enqueue on a non-blocking communicator: wait until NCCL accepted it.
  void after_enqueue(ncclResult_t r, const char* routine, deadline until) {
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string what = describe_nccl(r, routine, comm);
      if (r != ncclInvalidArgument && r != ncclInvalidUsage) do_abort("nccl: " + what);
      check_nccl(r, routine, comm);
    }
    if (r == ncclInProgress && !poll_until(until, [&] { return settled(routine); })) {
      timed_out(routine);
    }
  }

  [[noreturn]] void timed_out(const std::string& what) {
    const std::string msg = "nccl: " + what + " on rank " + std::to_string(rank) + " of " +
                            std::to_string(size) + " timed out; the communicator was aborted";
    do_abort(msg);
    throw timeout_error(msg);
  }

  std::shared_ptr<nccl_group> record(cudaStream_t s) {
    auto g = std::make_shared<nccl_group>();
    check_cuda(cudaEventCreateWithFlags(&g->event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(g->event, s), "cudaEventRecord");
    g->issued = true;
    return g;
  }

  // Issues the queued sends and receives as one NCCL group.
  void issue_queued() {
    std::shared_ptr<nccl_group> g = std::move(open_group);
    std::vector<queued_p2p> ops = std::move(queued);
    queued.clear();
    if (!g || g->issued) return;
    use_device();
    const deadline until = deadline_after(timeout);
    check_nccl(ncclGroupStart(), "ncclGroupStart", comm);
    for (const queued_p2p& op : ops) {
      const ncclResult_t r = op.is_send
                                 ? ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm, stream)
                                 : ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm, stream);
      if (r != ncclSuccess && r != ncclInProgress) {
        ncclGroupEnd();
        after_enqueue(r, op.is_send ? "ncclSend" : "ncclRecv", until);
      }
    }
    after_enqueue(ncclGroupEnd(), "ncclGroupEnd", until);
    check_cuda(cudaEventCreateWithFlags(&g->event, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(g->event, stream), "cudaEventRecord");
    g->issued = true;
  }
};

}  // namespace detail

namespace {

std::atomic<int> backends_created{0};  // every rank creates its backends in the same order

// `prefix`: this backend's keys in `kv` (default: the next of the process's backends).
std::shared_ptr<detail::nccl_state> create(store* kv, int rank, int size, int device,
                                           std::chrono::duration<double> timeout,
                                           std::string prefix = {}) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw invalid_argument_error("nccl: rank " + std::to_string(rank) + " of world size " +
                                 std::to_string(size) + " is not a valid rank");
  }
  auto s = std::make_shared<detail::nccl_state>();
  s->rank = rank;
  s->size = size;
  s->timeout = timeout;
  int devices = 0;
  detail::check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (device < 0 || device >= devices) {
    throw invalid_argument_error("nccl: CUDA device " + std::to_string(device) +
                                 " does not exist (" + std::to_string(devices) + " visible)");
  }
  s->device = device;
  s->use_device();
  const deadline until = deadline_after(timeout);

  const auto make_id = [] {
    ncclUniqueId id;
    detail::check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    bytes b(sizeof id);
    std::memcpy(b.data(), &id, sizeof id);
    return b;
  };
  if (prefix.empty()) prefix = "distcomm/nccl/" + std::to_string(backends_created++);
  s->prefix = prefix;
  const std::string key = prefix + "/unique_id";
  const bytes shared =
      (size == 1 || kv == nullptr)
          ? make_id()
          : detail::share_from_rank0(*kv, rank, key, sizeof(ncclUniqueId), make_id);
  ncclUniqueId id;
  std::memcpy(&id, shared.data(), sizeof id);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // creation and calls return at once; we poll with our deadline
  const ncclResult_t r = ncclCommInitRankConfig(&s->comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    s->comm = nullptr;  // nothing to finalize
    detail::check_nccl(r, "ncclCommInitRankConfig");
  }
  if (!detail::poll_until(until, [&] { return s->settled("ncclCommInitRankConfig"); })) {
    s->timed_out("ncclCommInitRankConfig (waiting for all " + std::to_string(size) +
                 " ranks to join)");
  }
  detail::check_cuda(cudaStreamCreateWithFlags(&s->own_stream, cudaStreamDefault),
                     "cudaStreamCreateWithFlags");
  s->stream = s->own_stream;
  return s;
}

std::chrono::duration<double> or_configured(std::optional<std::chrono::duration<double>> timeout) {
  return timeout ? *timeout : config::from_env().timeout;
}

std::string bytes_text(std::size_t n, dtype t) {
  return std::to_string(n) + " " + to_string(t) + " elements";
}

}  // namespace

nccl_backend::nccl_backend(store& kv, int rank, int size, int device,
                           std::optional<std::chrono::duration<double>> timeout)
    : state_(create(&kv, rank, size, device, or_configured(timeout))) {}

nccl_backend::nccl_backend(const job& j, int device,
                           std::optional<std::chrono::duration<double>> timeout) {
  if (device < 0) {
    int devices = 0;
    detail::check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    device = devices > 0 ? j.world.local_rank % devices : 0;
  }
  state_ = create(j.kv.get(), j.world.rank, j.world.size, device, or_configured(timeout));
  state_->kv = j.kv;
}

nccl_backend::nccl_backend(ncclComm_t comm, ownership kind,
                           std::optional<std::chrono::duration<double>> timeout)
    : state_(std::make_shared<detail::nccl_state>()) {
  if (comm == nullptr) throw invalid_argument_error("nccl: adopting a null ncclComm_t");
  state_->comm = comm;
  state_->owned = kind == take_ownership;
  state_->timeout = or_configured(timeout);
  detail::check_nccl(ncclCommUserRank(comm, &state_->rank), "ncclCommUserRank", comm);
  detail::check_nccl(ncclCommCount(comm, &state_->size), "ncclCommCount", comm);
  detail::check_nccl(ncclCommCuDevice(comm, &state_->device), "ncclCommCuDevice", comm);
  state_->use_device();
  detail::check_cuda(cudaStreamCreateWithFlags(&state_->own_stream, cudaStreamDefault),
                     "cudaStreamCreateWithFlags");
  state_->stream = state_->own_stream;
}

std::optional<nccl_backend> nccl_backend::split(const std::vector<int>& members,
                                                const std::string& /*name*/) {
  detail::nccl_state& s = *state_;
  s.use_device();
  if (s.aborted.load()) throw peer_lost_error("nccl: split: " + s.abort_reason);
  // The smallest member names the group (groups are disjoint); the key is the new rank.
  const int color =
      members.empty() ? NCCL_SPLIT_NOCOLOR : *std::min_element(members.begin(), members.end());
  const int key = members.empty() ? 0 : detail::position_in(members, s.rank, nccl_backend::name);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // as the parent: we poll with our deadline
  ncclComm_t child = nullptr;
  const deadline until = deadline_after(s.timeout);
  s.after_enqueue(ncclCommSplit(s.comm, color, key, &child, &config), "ncclCommSplit", until);
  if (child == nullptr) return std::nullopt;
  const bool ready = detail::poll_until(until, [&] {
    ncclResult_t r = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(child, &r);
    if (q != ncclSuccess) r = q;
    if (r == ncclInProgress) return false;
    if (r != ncclSuccess) {
      ncclCommAbort(child);
      detail::check_nccl(r, "ncclCommSplit", nullptr);
    }
    return true;
  });
  if (!ready) {
    ncclCommAbort(child);
    throw timeout_error("nccl: ncclCommSplit on rank " + std::to_string(s.rank) + " of " +
                        std::to_string(s.size) +
                        " timed out: the other members of its group did not join");
  }
  return nccl_backend(child, take_ownership, s.timeout);
}

std::shared_ptr<store> nccl_backend::group_store() const {
  if (!state_->kv) {
    throw invalid_argument_error(
        "nccl: this backend has no store of its own (it was made over a store it does not own, "
        "or adopts an ncclComm_t): make it from a job (nccl_backend(job, device)) to shrink it");
  }
  return std::make_shared<prefix_store>(state_->prefix + "/group/", state_->kv);
}

std::optional<nccl_backend> nccl_backend::survivors(const std::vector<int>& members,
                                                    const std::string& name) {
  if (members.empty()) return std::nullopt;
  const detail::nccl_state& s = *state_;
  const int me = detail::position_in(members, s.rank, nccl_backend::name);
  const std::shared_ptr<store> kv = group_store();
  auto child = create(kv.get(), me, static_cast<int>(members.size()), s.device, s.timeout,
                      s.prefix + "/survivors/" + name);
  child->kv = s.kv;
  return nccl_backend(std::move(child));
}

int nccl_backend::rank() const noexcept { return state_->rank; }
int nccl_backend::size() const noexcept { return state_->size; }
int nccl_backend::device() const noexcept { return state_->device; }
ncclComm_t nccl_backend::comm() const noexcept { return state_->comm; }
cudaStream_t nccl_backend::stream() const noexcept { return state_->stream; }
void nccl_backend::set_stream(cudaStream_t s) noexcept { state_->stream = s; }

void nccl_backend::abort(const std::string& reason) noexcept { state_->do_abort(reason); }

nccl_request nccl_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("send to rank " + std::to_string(peer));
  if (!s.open_group) s.open_group = std::make_shared<detail::nccl_group>();
  s.queued.push_back({true, const_cast<void*>(data), bytes, peer});
  return nccl_request(state_, s.open_group,
                      "send of " + std::to_string(bytes) + " bytes to rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) + ")");
}

nccl_request nccl_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("receive from rank " + std::to_string(peer));
  if (!s.open_group) s.open_group = std::make_shared<detail::nccl_group>();
  s.queued.push_back({false, data, bytes, peer});
  return nccl_request(state_, s.open_group,
                      "receive of " + std::to_string(bytes) + " bytes from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) + ")");
}

bool nccl_request::test() {
  if (!group_ || group_->done) return true;
  detail::nccl_state& s = *state_;
  if (s.aborted) s.throw_aborted(what_);
  if (!group_->issued) s.issue_queued();
  s.settled(what_.c_str());
  const cudaError_t e = cudaEventQuery(group_->event);
  if (e == cudaErrorNotReady) return false;
  detail::check_cuda(e, "cudaEventQuery");
  group_->done = true;
  return true;
}

void nccl_request::wait(deadline until) {
  if (!group_ || group_->done) return;
  if (!detail::poll_until(until, [&] { return test(); })) state_->timed_out(what_);
}

nccl_request nccl_backend::iallreduce(const void* in, void* out, std::size_t count, dtype t,
                                      reduce_op op, cudaStream_t st) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("allreduce");
  bool divide_after = false;
  const ncclRedOp_t nop = detail::nccl_redop(op, t, &divide_after);
  s.use_device();
  s.after_enqueue(ncclAllReduce(in, out, count, detail::nccl_datatype(t), nop, s.comm, st),
                  "ncclAllReduce", deadline_after(s.timeout));
  if (divide_after) cuda::divide(out, out, count, t, static_cast<std::size_t>(s.size), st);
  return nccl_request(state_, s.record(st), "allreduce of " + bytes_text(count, t));
}

nccl_request nccl_backend::ireduce_scatter(const void* in, void* out, std::size_t recv_count,
                                           dtype t, reduce_op op, cudaStream_t st) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("reduce_scatter");
  bool divide_after = false;
  const ncclRedOp_t nop = detail::nccl_redop(op, t, &divide_after);
  s.use_device();
  s.after_enqueue(ncclReduceScatter(in, out, recv_count, detail::nccl_datatype(t), nop, s.comm, st),
                  "ncclReduceScatter", deadline_after(s.timeout));
  if (divide_after) cuda::divide(out, out, recv_count, t, static_cast<std::size_t>(s.size), st);
  return nccl_request(state_, s.record(st), "reduce_scatter of " + bytes_text(recv_count, t));
}

nccl_request nccl_backend::iallgather(const void* in, void* out, std::size_t send_count, dtype t,
                                      cudaStream_t st) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("allgather");
  s.use_device();
  s.after_enqueue(ncclAllGather(in, out, send_count, detail::nccl_datatype(t), s.comm, st),
                  "ncclAllGather", deadline_after(s.timeout));
  return nccl_request(state_, s.record(st), "allgather of " + bytes_text(send_count, t));
}

nccl_request nccl_backend::ibroadcast(void* data, std::size_t count, dtype t, int root,
                                      cudaStream_t st) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("broadcast");
  s.use_device();
  s.after_enqueue(ncclBroadcast(data, data, count, detail::nccl_datatype(t), root, s.comm, st),
                  "ncclBroadcast", deadline_after(s.timeout));
  return nccl_request(
      state_, s.record(st),
      "broadcast of " + bytes_text(count, t) + " from rank " + std::to_string(root));
}

void nccl_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                    reduce_op op, deadline until) {
  iallreduce(in, out, count, t, op, stream()).wait(until);
}

void nccl_backend::native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                                         reduce_op op, deadline until) {
  ireduce_scatter(in, out, recv_count, t, op, stream()).wait(until);
}

void nccl_backend::native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                                    deadline until) {
  iallgather(in, out, send_count, t, stream()).wait(until);
}

void nccl_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                    deadline until) {
  ibroadcast(data, count, t, root, stream()).wait(until);
}

nccl_memory nccl_backend::memory() {
  state_->use_device();
  return nccl_memory(state_.get());
}

namespace {

// Grows a device buffer to at least `bytes`. Strategies ask for scratch at the start of a
// collective, and fold's accumulator is largest at its first call in one, so the old buffer is
// idle by then; the stream is synchronised anyway before it is freed.
void* grow(void*& buffer, std::size_t& capacity, std::size_t bytes, cudaStream_t stream) {
  if (bytes > capacity) {
    if (buffer != nullptr) {
      detail::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      detail::check_cuda(cudaFree(buffer), "cudaFree");
      buffer = nullptr;
      capacity = 0;
    }
    detail::check_cuda(cudaMalloc(&buffer, bytes), "cudaMalloc");
    capacity = bytes;
  }
  return buffer;
}

}  // namespace

void nccl_backend::host_allgather(const void* in, void* out, std::size_t bytes, deadline until) {
  auto& s = *state_;
  if (s.aborted) s.throw_aborted("a group agreement");
  s.use_device();
  const std::size_t all = bytes * static_cast<std::size_t>(s.size);
  auto* dev = static_cast<unsigned char*>(
      grow(s.host_staging, s.host_staging_bytes, bytes + all, s.stream));
  detail::check_cuda(cudaMemcpyAsync(dev, in, bytes, cudaMemcpyHostToDevice, s.stream),
                     "cudaMemcpyAsync");
  native_allgather(dev, dev + bytes, bytes, dtype::u8, until);
  detail::check_cuda(cudaMemcpyAsync(out, dev + bytes, all, cudaMemcpyDeviceToHost, s.stream),
                     "cudaMemcpyAsync");
  memory().complete(until);  // `out` is written once the stream passed the copy
}

void nccl_memory::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  detail::check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s_->stream),
                     "cudaMemcpyAsync");
}

void nccl_memory::combine(void* dst, const void* a, const void* b, std::size_t count, dtype t,
                          reduce_op op) {
  cuda::combine(dst, a, b, count, t, op, s_->stream);
}

void nccl_memory::divide(void* dst, const void* src, std::size_t count, dtype t,
                         std::size_t divisor) {
  cuda::divide(dst, src, count, t, divisor, s_->stream);
}

void nccl_memory::fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
                       reduce_op op) {
  void* acc = n > 2 && count != 0
                  ? grow(s_->fold_acc, s_->fold_acc_bytes, count * dtype_size(t), s_->stream)
                  : nullptr;
  cuda::fold(dst, in, n, count, t, op, acc, s_->stream);
}

unsigned char* nccl_memory::scratch(std::size_t bytes) {
  return static_cast<unsigned char*>(grow(s_->scratch, s_->scratch_bytes, bytes, s_->stream));
}

void nccl_memory::complete(deadline until) {
  detail::nccl_state& s = *s_;
  if (s.complete_event == nullptr) {
    detail::check_cuda(cudaEventCreateWithFlags(&s.complete_event, cudaEventDisableTiming),
                       "cudaEventCreate");
  }
  detail::check_cuda(cudaEventRecord(s.complete_event, s.stream), "cudaEventRecord");
  const bool done = detail::poll_until(until, [&] {
    if (s.aborted) s.throw_aborted("a point-to-point collective");
    const cudaError_t e = cudaEventQuery(s.complete_event);
    if (e == cudaErrorNotReady) return false;
    detail::check_cuda(e, "cudaEventQuery");
    return true;
  });
  if (!done) s.timed_out("the reductions and copies of a point-to-point collective");
}

// NCCL has no barrier: an allreduce of one integer, waited on, is one.
void nccl_backend::native_barrier(deadline until) {
  auto& s = *state_;
  if (s.barrier_scratch == nullptr) {
    s.use_device();
    detail::check_cuda(cudaMalloc(&s.barrier_scratch, sizeof(int)), "cudaMalloc");
    detail::check_cuda(cudaMemsetAsync(s.barrier_scratch, 0, sizeof(int), s.stream),
                       "cudaMemsetAsync");
  }
  iallreduce(s.barrier_scratch, s.barrier_scratch, 1, dtype::i32, reduce_op::max, s.stream)
      .wait(until);
}

nccl_backend nccl_backend::connect(const config& cfg, const job* given) {
  return nccl_backend(given ? *given : shared_bootstrap(cfg), -1, cfg.timeout);
}

}  // namespace distcomm
