// The NCCL backend: NCCL's collectives and send/recv on CUDA device memory. Every operation is
// enqueued on a CUDA stream (the backend's own, or the caller's through set_stream / the stream
// arguments) and returns at once; its request completes on a CUDA event recorded after it.
// Communicators are created non-blocking (ncclConfig_t::blocking = 0), so creation, every wait and
// teardown poll ncclCommGetAsyncError against a deadline instead of hanging on a lost peer.
// On a timeout or an NCCL error the communicator is aborted (ncclCommAbort) and the error says
// which NCCL routine failed, with ncclGetErrorString and ncclGetLastError.
// Point-to-point: NCCL has no tags, so a message matches the next receive posted for the same
// peer, whatever its tag; sizes are not checked (NCCL requires equal sizes). Sends and receives
// posted one after the other are queued and issued as one NCCL group when a request of them is
// first tested or waited on, so a ring's "receive from left, send to right" cannot deadlock; a
// request completes with its whole group, and groups run one after the other on the stream.
// strategy::ring, tree and parameter_server run on this backend through memory() (copies and
// CUDA reduction kernels on the same stream) and post their operations round by round so that
// every group is matched by the peers' groups of the same round (strategy/algorithms/common.hpp).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm {

namespace detail {
struct nccl_state;
struct nccl_group;

// NCCL's type for a dtype (every DistComm dtype has one: i8 -> ncclInt8, bf16 -> ncclBfloat16,
// ...); invalid_argument_error for a value that is not a dtype.
ncclDataType_t nccl_datatype(dtype t);
// NCCL's operation for (op, dtype). Floating-point avg is ncclAvg; integer avg is ncclSum followed
// by DistComm's truncating division (ncclAvg rounds integers differently from the other
// backends), signalled through *divide_after.
ncclRedOp_t nccl_redop(reduce_op op, dtype t, bool* divide_after);

// Rank 0 calls make() and publishes the value under `key`; every other rank reads it (waiting up
// to the store's timeout). How the NCCL unique id travels; a rendezvous_error when a rank reads a
// value of another size than `expected_bytes`.
bytes share_from_rank0(store& kv, int rank, const std::string& key, std::size_t expected_bytes,
                       const std::function<bytes()>& make);
}  // namespace detail

// The memory operations of the point-to-point strategies (backend.hpp) on device memory: copies
// (cudaMemcpyAsync) and the kernels of distcomm/cuda/kernels.hpp, enqueued on the backend's stream,
// so they are ordered with its sends and receives. Scratch space is one grow-only cudaMalloc buffer
// of the backend, freed with it. A handle: copies share the backend's state.
class nccl_memory {
 public:
  void copy(void* dst, const void* src, std::size_t bytes);
  void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t, reduce_op op);
  void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor);
  // The same left fold, rounding after every step, as distcomm::fold: the same bits.
  void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
            reduce_op op);
  // At least `bytes` of device memory, reused by the next call (contents not kept on growth).
  unsigned char* scratch(std::size_t bytes);
  // Returns once the stream has run everything enqueued so far; timeout_error (the communicator
  // is aborted) past `until`.
  void complete(deadline until);

 private:
  friend class nccl_backend;
  explicit nccl_memory(detail::nccl_state* s) noexcept : s_(s) {}
  detail::nccl_state* s_;
};

// A pending NCCL operation. Move-only; empty (default-constructed) means complete.
// test() and wait() throw peer_lost_error after abort(), timeout_error past the deadline (the
// communicator is then aborted), and the NCCL error of an asynchronous failure.
// Destroying a pending request does not block: the operation stays ordered on its stream, and
// after abort() it ends with the communicator. Keep its buffers alive until the stream passes it.
class [[nodiscard]] nccl_request {
 public:
  nccl_request() = default;
  nccl_request(nccl_request&&) noexcept = default;
  nccl_request& operator=(nccl_request&&) noexcept = default;
  nccl_request(const nccl_request&) = delete;
  nccl_request& operator=(const nccl_request&) = delete;
  ~nccl_request() = default;

  bool test();
  void wait(deadline until);

 private:
  friend class nccl_backend;
  nccl_request(std::shared_ptr<detail::nccl_state> state, std::shared_ptr<detail::nccl_group> g,
               std::string what)
      : state_(std::move(state)), group_(std::move(g)), what_(std::move(what)) {}

  std::shared_ptr<detail::nccl_state> state_;  // keeps the communicator alive
  std::shared_ptr<detail::nccl_group> group_;  // the CUDA event this request completes on
  std::string what_;                           // "allreduce of 4096 bytes", for errors
};

class nccl_backend {
 public:
  using request = nccl_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits("nccl", "NCCL on CUDA device memory, one GPU per rank")
          .moves(memory_kind::cuda)
          .with(capability::processes | capability::store | capability::split | capability::shrink)
          .default_rank(0);
  static constexpr const char* name = traits.name();
  // NCCL's reduction order depends on its algorithm (ring, tree, NVLS) and protocol.
  static constexpr bool native_is_deterministic = false;
  // NCCL tunes its algorithms per size and topology itself.
  static constexpr const char* default_algo = "native:0-max";

  // How an adopted communicator is held.
  enum ownership {
    attach,          // used as is; never finalized, destroyed or aborted by us
    take_ownership,  // ours from now on: finalized and destroyed (or aborted) by us
  };

  // Collective over the `size` ranks sharing `kv`: rank 0 creates the NCCL unique id and publishes
  // it through the store, then all create a non-blocking communicator on CUDA device `device`
  // within `timeout`, which also bounds teardown. `kv` is used only inside the constructor.
  // Unset `timeout`: DISTCOMM_TIMEOUT (config::from_env().timeout), in every constructor.
  nccl_backend(store& kv, int rank, int size, int device,
               std::optional<std::chrono::duration<double>> timeout = std::nullopt);
  // From distcomm::bootstrap(), on device `device` (-1: the world's local rank, modulo the number
  // of visible devices). A one-rank job needs no store.
  explicit nccl_backend(const job& j, int device = -1,
                        std::optional<std::chrono::duration<double>> timeout = std::nullopt);
  // Adopts a communicator (its device becomes current for every call).
  nccl_backend(ncclComm_t comm, ownership kind,
               std::optional<std::chrono::duration<double>> timeout = std::nullopt);

  nccl_backend(nccl_backend&&) noexcept = default;
  nccl_backend& operator=(nccl_backend&&) noexcept = default;
  nccl_backend(const nccl_backend&) = delete;
  nccl_backend& operator=(const nccl_backend&) = delete;
  ~nccl_backend() = default;  // the last request or copy of the state tears down

  // This rank of `given` (a job the program met itself), else of the job the launcher started
  // (shared_bootstrap), on device local rank modulo the devices; cfg.timeout.
  static nccl_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept;
  int size() const noexcept;
  int device() const noexcept;
  ncclComm_t comm() const noexcept;
  // The stream every call without a stream argument uses: a stream created for this backend,
  // blocking (it runs after what the caller put on the default stream before the call), until
  // set_stream() (e.g. with a framework's current stream; not owned).
  cudaStream_t stream() const noexcept;
  void set_stream(cudaStream_t s) noexcept;

  [[nodiscard]] nccl_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] nccl_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // Copies, reductions and scratch on stream() for the point-to-point strategies.
  nccl_memory memory();

  // Fails every pending and future wait with peer_lost_error(reason). An owned communicator is
  // aborted (ncclCommAbort ends its kernels); an attached one is only marked: abort it yourself.
  void abort(const std::string& reason) noexcept;

  // Asynchronous collectives on `s` (counts in elements, as in nccl.h).
  [[nodiscard]] nccl_request iallreduce(const void* in, void* out, std::size_t count, dtype t,
                                        reduce_op op, cudaStream_t s);
  [[nodiscard]] nccl_request ireduce_scatter(const void* in, void* out, std::size_t recv_count,
                                             dtype t, reduce_op op, cudaStream_t s);
  [[nodiscard]] nccl_request iallgather(const void* in, void* out, std::size_t send_count, dtype t,
                                        cudaStream_t s);
  [[nodiscard]] nccl_request ibroadcast(void* data, std::size_t count, dtype t, int root,
                                        cudaStream_t s);

  // The native collectives strategy::native calls: the above on stream(), waited until `until`.
  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until);
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t, deadline until);
  // Every rank's `bytes` of host memory, in rank order, through a device buffer of its own: the
  // group agreements (split's colors and keys, subset's lists; backend.hpp).
  void host_allgather(const void* in, void* out, std::size_t bytes, deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_barrier(deadline until);

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with its own transport context, independent of this one: split() and subset() of
  // communicator.hpp. `name` is the same on each member and unique among this backend's splits.
  // An empty `members` (this rank joins no group) gives nothing.
  // ncclCommSplit, non-blocking, waited for within the timeout; collective over every rank of
  // this backend, including those that join no group (they pass no members).
  std::optional<nccl_backend> split(const std::vector<int>& members, const std::string& name);

  // After a failure, the survivors' backend (communicator::shrink): a new NCCL communicator of
  // `members` (this rank among them, in their new order) whose unique id they share through the
  // group store. Not ncclCommSplit or ncclCommShrink: both need the failed communicator alive on
  // every survivor, and a rank that saw the failure aborted it (ncclCommAbort ends the kernels
  // that wait for a lost peer).
  std::optional<nccl_backend> survivors(const std::vector<int>& members, const std::string& name);
  // This backend's namespace of the job's store (made from a job; invalid_argument_error when it
  // was made over a store it does not own, or adopted).
  std::shared_ptr<store> group_store() const;

 private:
  explicit nccl_backend(std::shared_ptr<detail::nccl_state> s) noexcept : state_(std::move(s)) {}

  std::shared_ptr<detail::nccl_state> state_;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend with cuda::fusion for grouped calls:
// every strategy's communicator compiled once, in DistComm::nccl, not in each program that calls
// it.
any_communicator make_communicator(nccl_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
