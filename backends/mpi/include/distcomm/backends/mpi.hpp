// The MPI backend: DistComm's strategies over MPI_Isend/MPI_Irecv, and MPI's own nonblocking
// collectives (MPI_Iallreduce, ...) as the native ones. Only the MPI C API is used.
// Abort behaviour: abort(reason) fails every pending and later wait of THIS process with
// peer_lost_error(reason); it does not call MPI_Abort (that would kill the whole job, including
// ranks that could still report the failure). Other ranks blocked on this one fail with
// timeout_error at their own deadline. Call MPI_Abort yourself if you prefer to end the job.
// A rank killed outright (SIGKILL) is seen by mpirun, which aborts the whole job with a message
// naming the dead rank (Open MPI's default policy; tests/faults checks the job ends).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"

namespace distcomm {

namespace detail {
struct mpi_state;

// One MPI message of a request. A message travels as several pieces above INT_MAX bytes (1 GiB
// each) and from 4,000 to 12,000 bytes (4,000 each, Open MPI's eager size over shared memory):
// backends/mpi/src/pieces.hpp.
struct mpi_piece {
  unsigned char* data = nullptr;
  int bytes = 0;
  // Receives: the size of the message matched to this piece (MPI_Improbe), -1 until then; the
  // receive into `data` is posted only when it equals `bytes` (is at most `bytes` where up_to).
  // Sends: `bytes`.
  int got = -1;
  bool up_to = false;            // irecv_up_to's: takes any size up to `bytes`
  int error = 0;                 // MPI_SUCCESS, or the code of a failed MPI_Improbe/MPI_Imrecv
  const char* failed = nullptr;  // the routine that returned `error`
  MPI_Request req = MPI_REQUEST_NULL;  // MPI_REQUEST_NULL once finished (or before the match)
};
}  // namespace detail

// A pending send or receive, move-only. A receive is matched with MPI_Improbe and received with
// MPI_Imrecv only when the message has the posted size, so MPI never writes a byte it was not
// asked for (Open MPI 4.1 writes a too-large message past the posted buffer before it reports
// MPI_ERR_TRUNCATE); receives posted for one peer and tag match in posting order, whatever order
// they are tested in. The price is latency: a message that arrives before its receive is matched
// is queued by MPI as unexpected and copied twice, and MPI_Improbe costs more per poll than
// MPI_Test (docs/PERFORMANCE.md, "Each backend's own defaults"); no pre-posted receive is safe,
// because any message larger than it may take the rendezvous path.
// Destroying a receive not matched yet retracts it (the next message goes to the next receive);
// one already matched is waited for at most 3 s (0.1 s once a peer failed this process).
// Destroying a pending send (MPI cannot reliably cancel sends) waits at most 3 s for the peer to
// take it, or not at all once a peer failed this process (a wait timed out, MPI reported an error,
// abort(), or an earlier send was given up this way).
// A send or matched receive still pending then is left to MPI, which may still read or write its
// buffer during any later MPI call of the process: so the process is fenced, and the backend makes
// no MPI call in it again (every communicator's next call throws peer_lost_error saying why).
// Calls on requests and backends must be serialized across the whole process (the backend asks
// MPI for MPI_THREAD_SERIALIZED): testing any request matches the receives of every backend.
class [[nodiscard]] mpi_request {
 public:
  mpi_request() = default;  // an empty request is complete
  mpi_request(mpi_request&& other) noexcept;
  mpi_request& operator=(mpi_request&& other) noexcept;
  mpi_request(const mpi_request&) = delete;
  mpi_request& operator=(const mpi_request&) = delete;
  ~mpi_request();

  // True once every piece finished; throws mismatch_error on a size mismatch (every time it is
  // called), peer_lost_error after abort(), backend_error on an MPI error.
  bool test();
  // Polls until done or `until` passed. On timeout a receive is cancelled; a send is left to the
  // destructor, which (like those of every other pending send) then frees it at once. Throws
  // timeout_error naming the operation, peer, tag and bytes.
  void wait(deadline until);

 private:
  friend class mpi_backend;
  mpi_request(std::shared_ptr<detail::mpi_state> state, bool is_send, int peer, tag_t tag,
              std::size_t bytes)
      : state_(std::move(state)), is_send_(is_send), peer_(peer), tag_(tag), bytes_(bytes) {}
  std::string describe() const;
  [[noreturn]] void throw_mismatch(const detail::mpi_piece& p) const;
  void cancel() noexcept;

  std::shared_ptr<detail::mpi_state> state_;  // keeps the communicator alive
  // Never resized once posted: a receive's pieces are known by address until they are matched.
  std::vector<detail::mpi_piece> pieces_;
  bool is_send_ = false;
  int peer_ = 0;
  tag_t tag_ = 0;
  std::size_t bytes_ = 0;
  std::size_t* got_ = nullptr;  // irecv_up_to: where the message's size goes
};

class mpi_backend {
 public:
  using request = mpi_request;
  // What this backend is and can do, declared once (backend_traits.hpp).
  static constexpr backend_traits traits =
      backend_traits("mpi", "MPI_COMM_WORLD of mpirun/mpiexec/srun (Open MPI, MPICH)")
          .with(capability::processes | capability::mpi_world | capability::split)
          .default_rank(2);
  static constexpr const char* name = traits.name();
  // MPI's reductions combine in an order that depends on the algorithm it picks (and on the
  // number of processes per node), so results may differ in the last bits from ring/tree.
  static constexpr bool native_is_deterministic = false;
  // A message nobody receives must not outlive its communicator: a communicator freed with one
  // pending gives its context id to the next MPI_Comm_dup, and Open MPI delivers the message
  // there (backend.hpp). So a communicator's departure is not announced on MPI; the ranks still
  // calling collectives report it at their deadline.
  static constexpr bool unreceived_messages_ok = false;
  // MPI's collectives are tuned per size and topology by the MPI library itself (Open MPI's
  // coll/tuned decision rules), so strategy::automatic defers to them, except below 64 KiB where
  // our recursive doubling over MPI point-to-point beat the native MPI_Iallreduce
  // (docs/PERFORMANCE.md, "Each backend's own defaults").
  static constexpr const char* default_algo = "rd:0-64K;native:64K-max";
  // The call check's messages carry up to 11,936 bytes of contributions (check/carried.hpp): with
  // the exchange's header, at most three of the pieces that stay in Open MPI's eager protocol
  // over shared memory (btl vader; backends/mpi/src/pieces.hpp). Above, the separate agreement
  // costs under 10% of the call. At 2 processes, 2026-11-28 22:10 UTC: 8 KiB carried took 2.15 us
  // (unchecked 2.06), with a separate agreement 2.63.
  static constexpr std::size_t carried_budget = 11936;

  // How an adopted communicator is held.
  enum ownership {
    duplicate,  // MPI_Comm_dup it; the duplicate is ours and freed by us
    attach,     // use it as is; never freed by us (its error handler is still set to return)
  };

  // Initializes MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED) unless already initialized, and
  // works on a duplicate of MPI_COMM_WORLD. MPI is finalized at exit only if it was us who
  // initialized it, and only if nothing failed in this process (a timeout, an MPI error, abort()):
  // MPI_Finalize would wait for the failed peer forever, so the launcher ends the job instead.
  // Throws rendezvous_error when a launcher's variables describe a world of another size than
  // MPI_COMM_WORLD: a non-MPI launcher's (distcomm-run, torchrun-style, TF_CONFIG, Slurm), or the
  // other MPI's (MPICH's mpiexec.hydra for a program built with Open MPI, Open MPI's mpirun for one
  // built with MPICH). The process would otherwise run alone as a one-process MPI job.
  mpi_backend();
  // Adopts an existing communicator (MPI must be initialized).
  mpi_backend(MPI_Comm comm, ownership kind);

  mpi_backend(mpi_backend&&) noexcept = default;
  mpi_backend& operator=(mpi_backend&&) noexcept = default;
  mpi_backend(const mpi_backend&) = delete;
  mpi_backend& operator=(const mpi_backend&) = delete;
  ~mpi_backend() = default;

  // MPI_COMM_WORLD: no store, so no master address is needed (multi-node mpirun); refuses
  // processes no MPI launcher started, saying how to start them. A `given` job must be
  // MPI_COMM_WORLD itself: MPI cannot adopt ranks met through another store.
  static mpi_backend connect(const config& cfg, const job* given = nullptr);

  int rank() const noexcept;
  int size() const noexcept;
  MPI_Comm comm() const noexcept;

  [[nodiscard]] mpi_request isend(const void* data, std::size_t bytes, int peer, tag_t tag);
  [[nodiscard]] mpi_request irecv(void* data, std::size_t bytes, int peer, tag_t tag);
  // A message of at most `capacity` (<= INT_MAX) bytes; its size goes to *got (backend.hpp).
  [[nodiscard]] mpi_request irecv_up_to(void* data, std::size_t capacity, std::size_t* got,
                                        int peer, tag_t tag);

  // Fails every pending and future wait of this process with peer_lost_error(reason).
  void abort(const std::string& reason) noexcept;

  // Native collectives: MPI's nonblocking collectives polled until `until`. MPI cannot cancel a
  // collective, so a timeout fences the process as a send given up does (mpi_request above).
  void native_allreduce(const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                        deadline until);
  void native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                             reduce_op op, deadline until);
  void native_allgather(const void* in, void* out, std::size_t send_count, dtype t, deadline until);
  void native_broadcast(void* data, std::size_t count, dtype t, int root, deadline until);
  void native_alltoall(const void* in, void* out, std::size_t block_count, dtype t, deadline until);
  // MPI_Ialltoallv; counts and displacements in elements, each within MPI's int. The counts are
  // not checked across ranks here (strategy::native agrees on them first).
  void native_alltoallv(const void* in, const std::size_t* send_counts,
                        const std::size_t* send_displs, void* out, const std::size_t* recv_counts,
                        const std::size_t* recv_displs, dtype t, deadline until);
  void native_barrier(deadline until);

  // A backend over `members` (ranks of this one, in their new rank order; this rank among
  // them) with its own transport context, independent of this one: split() and subset() of
  // communicator.hpp. `name` is the same on each member and unique among this backend's splits.
  // An empty `members` (this rank joins no group) gives nothing.
  // MPI_Comm_split: collective over every rank of this backend, including those that join no
  // group (they pass no members). MPI_Comm_split has no deadline: split() calls it only after
  // every rank has agreed on the groups through this backend (communicator.hpp), so every rank
  // is already there.
  std::optional<mpi_backend> split(const std::vector<int>& members, const std::string& name);

 private:
  explicit mpi_backend(std::shared_ptr<detail::mpi_state> state) noexcept
      : state_(std::move(state)) {}
  std::shared_ptr<detail::mpi_state> state_;
};

class any_communicator;
// make_communicator() (any_communicator.hpp) over this backend: every strategy's
// communicator compiled once, in DistComm::mpi, not in each program that calls it.
any_communicator make_communicator(mpi_backend backend, const std::string& strategy,
                                   config cfg = config::from_env());

}  // namespace distcomm
