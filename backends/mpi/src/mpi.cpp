#include "distcomm/backends/mpi.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "mpi_state.hpp"
#include "pieces.hpp"
#include "tags.hpp"

namespace distcomm {
namespace detail {

std::atomic<bool> mpi_process_failed{false};
std::atomic<bool> mpi_process_fenced{false};

namespace {
std::mutex& fence_mutex() {
  static std::mutex* m = new std::mutex;  // never destroyed (static teardown)
  return *m;
}
std::string& fence_reason() {
  static std::string* r = new std::string;
  return *r;
}
}  // namespace

void mpi_fence(const std::string& why) noexcept {
  try {
    std::lock_guard<std::mutex> lock(fence_mutex());
    if (fence_reason().empty()) fence_reason() = why;
  } catch (...) {
  }
  mpi_process_failed.store(true, std::memory_order_release);
  mpi_process_fenced.store(true, std::memory_order_release);
}

void mpi_check(int rc, const char* routine) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw backend_error(mpi_backend::name, routine, rc,
                      std::string(text, static_cast<std::size_t>(len)));
}

namespace {

// Open MPI runs MPI_Iallreduce (our native allreduce) in libnbc, which picks a binomial
// reduce-then-broadcast whenever there are fewer than 4 ranks. At 2 ranks that measured 0.6x the
// bus bandwidth of the blocking MPI_Allreduce from 64 KiB up, where libnbc's ring measured
// 0.97-1.01x (docs/PERFORMANCE.md). Open MPI reads MCA parameters from the environment at
// MPI_Init, so ask for the ring there unless the user chose an algorithm. Other MPIs ignore it.
void prefer_ring_iallreduce() {
#ifdef OPEN_MPI
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr || std::atoi(size) >= 4) return;  // libnbc's own choice is good from 4 up
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
#endif
}

// MPI_Init_thread once per process, and MPI_Finalize at exit only if we initialized it.
struct init_guard {
  bool we_initialized = false;
  init_guard() {
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (initialized) return;
    prefer_ring_iallreduce();
    int provided = 0;
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    we_initialized = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      throw backend_error(mpi_backend::name, "MPI_Init_thread", provided,
                          "the MPI library does not provide MPI_THREAD_SERIALIZED");
    }
  }
  // MPI_Finalize waits for every other process (Open MPI 4.1 ends it with a fence of the whole
  // job), so after a failure it would wait forever for a rank that is stopped or stuck: measured,
  // survivors that had reported their timeout_error never exited. Then MPI is left unfinalized, and
  // the launcher ends the job as it does for any process that exits without finalizing.
  ~init_guard() {
    int finalized = 0;
    if (!we_initialized || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
    if (mpi_process_failed.load(std::memory_order_acquire)) {
      log(log_level::warn,
          "mpi: MPI_Finalize skipped at exit: a peer failed this process earlier, and finalizing "
          "would wait for it; the MPI launcher ends the job");
      return;
    }
    MPI_Finalize();
  }
};

void ensure_initialized() { static init_guard guard; }

// The reductions in mpi_state::user_ops: the payload combined by distcomm::combine.
template <dtype T, reduce_op Op>
void user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  combine(inout, inout, in, static_cast<std::size_t>(*len), T, Op);
}
using user_fn = void(void*, void*, int*, MPI_Datatype*);
template <dtype T>
constexpr std::array<user_fn*, 4> user_fns_of = {
    user_op<T, reduce_op::sum>, user_op<T, reduce_op::min>, user_op<T, reduce_op::max>,
    user_op<T, reduce_op::prod>};
constexpr std::array<user_fn*, 4> user_fns[4] = {user_fns_of<dtype::f16>, user_fns_of<dtype::bf16>,
                                                 user_fns_of<dtype::i8>, user_fns_of<dtype::u8>};

}  // namespace

mpi_state::mpi_state(MPI_Comm c, bool own) : comm(c), owned(own) {
  try {
    mpi_check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    // MPI_TAG_UB as this MPI reports it (tags.hpp maps DistComm's tags into it). The standard
    // attaches it to MPI_COMM_WORLD; libraries answer for every communicator, but ask the world
    // when this one has none, and take the standard's minimum if neither answers.
    for (MPI_Comm on : {comm, MPI_COMM_WORLD}) {
      int* ub = nullptr;
      int has_ub = 0;
      mpi_check(MPI_Comm_get_attr(on, MPI_TAG_UB, &ub, &has_ub), "MPI_Comm_get_attr(MPI_TAG_UB)");
      if (has_ub != 0 && ub != nullptr && *ub >= 32767) {
        tag_ub = *ub;
        break;
      }
    }
    for (int d = 0; d < 4; ++d) {
      for (int o = 0; o < 4; ++o) {
        user_ops[d][o] = MPI_OP_NULL;
        mpi_check(MPI_Op_create(user_fns[d][o], 1, &user_ops[d][o]), "MPI_Op_create");
      }
    }
  } catch (...) {
    if (owned) MPI_Comm_free(&comm);
    throw;
  }
}

mpi_state::~mpi_state() {
  const mpi_lock lock(mpi_mutex());
  int finalized = 0;
  // After the fence even freeing a communicator is left undone: nothing may drive MPI.
  if (mpi_fenced() || MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  for (auto& row : user_ops) {
    for (MPI_Op& op : row) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }
  if (owned && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
}

void mpi_state::abort(const std::string& reason) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu);
    if (abort_reason.empty()) abort_reason = reason.empty() ? "aborted" : reason;
  } catch (...) {
  }
  aborted.store(true, std::memory_order_release);
  mpi_process_failed.store(true, std::memory_order_release);
}

namespace {
[[noreturn]] void throw_fenced(const std::string& me) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(fence_mutex());
    why = fence_reason();
  }
  throw peer_lost_error(me + "no MPI call is made in this process any more: " + why +
                        ", and MPI may still read or write its buffer during any MPI call (MPI "
                        "cannot cancel it). End the process; do not call MPI from it either "
                        "(docs/FAULTS.md, \"Memory after a failed call\")");
}
}  // namespace

void mpi_state::throw_aborted() {
  const std::string me = "mpi: rank " + std::to_string(rank) + ": ";
  if (mpi_fenced()) throw_fenced(me);
  std::lock_guard<std::mutex> lock(mu);
  throw peer_lost_error(me + "communicator aborted: " + abort_reason);
}

namespace {

// What MPI matches a message by: communicator, source and tag.
struct receive_key {
  MPI_Comm comm;
  int peer;
  int tag;
  bool operator==(const receive_key& o) const noexcept {
    return peer == o.peer && tag == o.tag && comm == o.comm;
  }
};

// MPI_Improbe for a message of `key`'s: `flag` set when one arrived, `m` then to receive it.
int probe(const receive_key& key, int& flag, MPI_Message& m, MPI_Status& st) {
  return MPI_Improbe(key.peer, key.tag, key.comm, &flag, &m, &st);
}

// A receive not fully matched yet: its pieces from `next` on wait for their messages.
struct pending_receive {
  receive_key key;
  mpi_piece* pieces;  // the request's; their address does not change while it is pending
  std::size_t count;
  std::size_t next;
};

// A message of the wrong size, received whole so that the next receive gets the next message.
struct discarded {
  MPI_Request req;
  std::unique_ptr<unsigned char[]> buf;
};

// Process-wide, as MPI's own matching is: a rank waiting on one backend must still take what a
// peer sends it through another (tests/backends' control communicator waits in barriers while the
// backend under test has receives pending). Allocated once and never destroyed, so that requests
// destroyed during static destruction still find them. Calls are serialized
// (MPI_THREAD_SERIALIZED).
struct receive_queue {
  std::vector<pending_receive> pending;  // posting order
  std::vector<discarded> discards;
  // Keys of split messages (pieces.hpp) whose receive took a piece of the wrong size, or went
  // before the message ended: the rest is discarded before any later receive of the key matches.
  std::vector<receive_key> drains;
  std::vector<receive_key> blocked;  // scratch of serve(): keys with nothing to match now
};

receive_queue& queue() {
  static receive_queue* q = new receive_queue;
  return *q;
}

// Receives a message of the wrong size into a buffer of its own, so that it is gone from MPI.
void discard(MPI_Message& msg, int got, std::vector<discarded>& discards) {
  discarded d{MPI_REQUEST_NULL,
              std::make_unique<unsigned char[]>(static_cast<std::size_t>(std::max(got, 1)))};
  if (MPI_Imrecv(d.buf.get(), got, MPI_BYTE, &msg, &d.req) == MPI_SUCCESS) {
    discards.push_back(std::move(d));
  }
}

// Matches e's next pieces with the messages that have arrived. True once nothing of it is left to
// match: every piece matched (or, for a receive of any size, the message ended), one had the
// wrong size, or MPI failed (recorded in the piece).
bool match(pending_receive& e, receive_queue& q) {
  while (e.next < e.count) {
    mpi_piece& p = e.pieces[e.next];
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    int rc = probe(e.key, flag, msg, st);
    if (rc != MPI_SUCCESS) {
      p.error = rc;
      p.failed = "MPI_Improbe";
      return true;
    }
    if (!flag) return false;
    ++e.next;
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    p.got = got;
    if (got == p.bytes || (p.up_to && got <= p.bytes)) {
      rc = MPI_Imrecv(p.data, got, MPI_BYTE, &msg, &p.req);
      if (rc != MPI_SUCCESS) {
        p.error = rc;
        p.failed = "MPI_Imrecv";
        return true;
      }
      if (p.up_to && !mpi_pieces::continues(got)) {  // the message ends here
        for (std::size_t i = e.next; i < e.count; ++i) e.pieces[i].got = 0;
        e.next = e.count;
      }
      continue;
    }
    // A size mismatch: the request reports it; its later pieces are not matched, and the rest of
    // the sender's message goes.
    discard(msg, got, q.discards);
    if (mpi_pieces::continues(got)) q.drains.push_back(e.key);
    return true;
  }
  return true;
}

// Discards d's next pieces as they arrive. True once its message ended.
bool drained(const receive_key& d, std::vector<discarded>& discards) {
  for (;;) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    if (probe(d, flag, msg, st) != MPI_SUCCESS) return true;
    if (!flag) return false;
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    discard(msg, got, discards);
    if (!mpi_pieces::continues(got)) return true;
  }
}

// Takes a not fully matched receive out of the queue (its pieces are about to go away). A split
// message it had begun to take is drained.
void retract(const mpi_piece* pieces) {
  receive_queue& q = queue();
  auto& pending = q.pending;
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    if (it->pieces == pieces) {
      if (it->next > 0 && mpi_pieces::continues(it->pieces[it->next - 1].got)) {
        q.drains.push_back(it->key);
      }
      pending.erase(it);  // keeps the others in posting order
      return;
    }
  }
}

}  // namespace

void mpi_serve_receives() {
  receive_queue& q = queue();
  if (!q.discards.empty()) {
    auto& d = q.discards;
    d.erase(std::remove_if(d.begin(), d.end(),
                           [](discarded& x) {
                             int flag = 0;
                             return MPI_Test(&x.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
                                    flag != 0;
                           }),
            d.end());
  }
  q.blocked.clear();
  if (!q.drains.empty()) {  // before any receive of their keys
    std::size_t left = 0;
    for (const receive_key& d : q.drains) {
      if (drained(d, q.discards)) continue;
      q.drains[left++] = d;
      q.blocked.push_back(d);
    }
    q.drains.resize(left);
  }
  if (q.pending.empty()) return;
  // One pass in posting order: a key whose first receive found nothing is skipped for the rest of
  // the pass, so receives of one peer and tag match in the order they were posted.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < q.pending.size(); ++i) {
    pending_receive& e = q.pending[i];
    bool done = false;
    const bool blocked = std::find(q.blocked.begin(), q.blocked.end(), e.key) != q.blocked.end();
    if (!blocked) {
      const std::size_t drains = q.drains.size();
      done = match(e, q);
      if (!done || q.drains.size() != drains) q.blocked.push_back(e.key);
    }
    if (!done) q.pending[kept++] = e;
  }
  q.pending.resize(kept);
}

}  // namespace detail

namespace {

// How long destroying a pending send waits for a healthy peer to take it, or a matched receive for
// its data. A peer inside a collective takes a message within milliseconds; seconds mean it is
// stuck, stopped or dead.
constexpr auto send_drain_limit = std::chrono::seconds(3);
// After a failure: a matched receive whose sender is healthy still ends within milliseconds.
constexpr auto failed_drain_limit = std::chrono::milliseconds(100);

void check_peer(int peer, int size, const char* what) {
  if (peer < 0 || peer >= size) {
    throw invalid_argument_error(std::string("mpi: ") + what + ": peer " + std::to_string(peer) +
                                 " is not a rank (world size " + std::to_string(size) + ")");
  }
}

// The launcher whose variables describe this MPI library's MPI_COMM_WORLD (OPEN_MPI and
// MPICH_VERSION come from mpi.h; Intel MPI and MVAPICH define MPICH_VERSION too). With another
// MPI both are trusted.
bool own_launcher(launcher_kind k) {
#if defined(OPEN_MPI)
  return k == launcher_kind::open_mpi;
#elif defined(MPICH_VERSION)
  return k == launcher_kind::mpich;
#else
  return k == launcher_kind::open_mpi || k == launcher_kind::mpich;
#endif
}

constexpr const char* mpi_library =
#if defined(OPEN_MPI)
    "Open MPI";
#elif defined(MPICH_VERSION)
    "MPICH";
#else
    "this MPI";
#endif

// A process that no launcher of this MPI started initializes MPI as a singleton: each such process
// would silently run its own one-rank job. That happens under a non-MPI launcher (distcomm-run
// without --backend mpi, a torchrun-style or TF_CONFIG environment, srun without an MPI plugin),
// and under the other MPI's launcher (measured: a program built with Open MPI 4.1 and started by
// MPICH's mpiexec.hydra -n 2 ran as two one-rank jobs, printed its results twice and exited 0).
// The launcher's variables say how many ranks were meant, so refuse a world that disagrees with
// them. This MPI's own launcher is not compared: its variables describe MPI_COMM_WORLD itself.
void check_launcher_world(int mpi_size) {
  world_info w;
  try {
    w = detect_world();
  } catch (const rendezvous_error&) {
    return;  // the variables describe no world; MPI's own is the only one to go by
  }
  if (w.launcher == launcher_kind::none || own_launcher(w.launcher) || w.size == mpi_size) return;
  const std::string n = std::to_string(w.size);
  const std::string head = "mpi: MPI_COMM_WORLD has " + std::to_string(mpi_size) + " process" +
                           (mpi_size == 1 ? "" : "es") + " but the launcher's variables (" +
                           to_string(w.launcher) + ") describe " + n + " ranks: ";
  if (w.launcher == launcher_kind::open_mpi || w.launcher == launcher_kind::mpich) {
    const bool by_hydra = w.launcher == launcher_kind::mpich;
    throw rendezvous_error(
        head + "this program is built with " + mpi_library + ", and processes started by " +
        (by_hydra ? "MPICH's launcher (mpiexec.hydra, mpirun.mpich)" : "Open MPI's mpirun") +
        " do not join one MPI job, so each would run alone. Start it with " +
        (by_hydra ? "Open MPI's mpirun (mpirun.openmpi -np "
                  : "MPICH's mpiexec (mpiexec.hydra -n ") +
        n + "), or build it against the MPI whose launcher you use");
  }
  throw rendezvous_error(
      head +
      "this process was not started by an MPI launcher for this job, "
      "so MPI would run it in a separate world. Start MPI jobs with mpirun -np " +
      n + " or distcomm-run --backend mpi -np " + n +
      " (which runs mpirun), or srun --mpi=pmix under Slurm; or choose "
      "another backend");
}

}  // namespace

// ---- mpi_request -------------------------------------------------------------------------------

mpi_request::mpi_request(mpi_request&& other) noexcept
    : state_(std::move(other.state_)),
      pieces_(std::move(other.pieces_)),
      is_send_(other.is_send_),
      peer_(other.peer_),
      tag_(other.tag_),
      bytes_(other.bytes_),
      got_(other.got_) {
  other.pieces_.clear();
}

mpi_request& mpi_request::operator=(mpi_request&& other) noexcept {
  if (this != &other) {
    cancel();
    state_ = std::move(other.state_);
    pieces_ = std::move(other.pieces_);  // the buffer moves: queued pieces keep their address
    other.pieces_.clear();
    is_send_ = other.is_send_;
    peer_ = other.peer_;
    tag_ = other.tag_;
    bytes_ = other.bytes_;
    got_ = other.got_;
  }
  return *this;
}

mpi_request::~mpi_request() { cancel(); }

std::string mpi_request::describe() const {
  return std::string(is_send_ ? "send of " : "receive of ") + std::to_string(bytes_) + " bytes " +
         (is_send_ ? "to" : "from") + " rank " + std::to_string(peer_) + " (tag " +
         std::to_string(tag_) + ")";
}

void mpi_request::throw_mismatch(const detail::mpi_piece& p) const {
  // The pieces before p matched exactly. A piece of 1 GiB or of mpi_pieces::eager_piece bytes
  // has more behind it (pieces.hpp).
  const std::size_t before = static_cast<std::size_t>(p.data - pieces_.front().data);
  const std::size_t sent = before + static_cast<std::size_t>(p.got);
  const bool more = static_cast<std::size_t>(p.got) == detail::mpi_pieces::max_piece ||
                    detail::mpi_pieces::continues(p.got);
  const std::string me = std::to_string(state_->rank);
  throw mismatch_error("mpi: rank " + me + ": " + describe() + ": rank " + std::to_string(peer_) +
                       " sent " + (more ? "at least " : "") + std::to_string(sent) +
                       " bytes, rank " + me + " expected " + std::to_string(bytes_) +
                       "; both ranks must use the same count and dtype");
}

bool mpi_request::test() {
  if (!state_) return true;
  const detail::mpi_lock lock(detail::mpi_mutex());
  state_->check_aborted();
  detail::mpi_serve_receives();  // sends too: a peer's send may wait on a receive of ours
  bool all_done = true;
  for (detail::mpi_piece& p : pieces_) {
    if (p.error != MPI_SUCCESS) {
      state_->mark_failed();
      detail::mpi_check(p.error, p.failed);
    }
    if (p.got < 0) {  // not matched yet (pieces match in order: neither are the later ones)
      all_done = false;
      break;
    }
    if (p.got != p.bytes && !(p.up_to && p.got < p.bytes)) throw_mismatch(p);
    if (p.req == MPI_REQUEST_NULL) continue;
    int flag = 0;
    const int rc = MPI_Test(&p.req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      p.req = MPI_REQUEST_NULL;  // an erroneous request is complete
      p.error = rc;
      p.failed = "MPI_Test";
      state_->mark_failed();  // a lost peer or a broken transport
      detail::mpi_check(rc, "MPI_Test");
    }
    if (!flag) all_done = false;
  }
  if (all_done) {
    if (got_) {
      std::size_t sum = 0;
      for (const detail::mpi_piece& p : pieces_) sum += static_cast<std::size_t>(p.got);
      *got_ = sum;
    }
    pieces_.clear();
    state_.reset();
  }
  return all_done;
}

void mpi_request::wait(deadline until) {
  if (!state_) return;
  if (detail::mpi_poll([&] { return test(); }, until)) return;
  const std::string what = describe();
  const int me = state_->rank;
  // The peer is not answering: the sends still pending to it, here and in the other requests the
  // caller destroys while this exception unwinds, are freed at once instead of waited for.
  state_->mark_failed();
  if (!is_send_) cancel();  // a receive can be cancelled; a send is left to the destructor
  throw timeout_error("mpi: rank " + std::to_string(me) + ": " + what +
                      " did not complete before the deadline (DISTCOMM_TIMEOUT); rank " +
                      std::to_string(peer_) +
                      " may be dead, stuck or not calling the same "
                      "collective");
}

void mpi_request::cancel() noexcept {
  if (!state_) return;
  const detail::mpi_lock lock(detail::mpi_mutex());
  int finalized = 0;
  if (!is_send_) detail::retract(pieces_.data());  // pieces not matched yet simply go
  // After the fence no MPI call at all: what MPI holds of this request is simply left to it.
  if (!detail::mpi_fenced() && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    // What MPI already holds cannot be called back: MPI_Cancel of a send is deprecated and not
    // implemented by Open MPI's ob1, and a matched receive cannot be cancelled. A healthy peer
    // completes either soon (it is sending, or will take the message), so wait a bounded time; a
    // send after a failure will not be taken, so let go at once, and give a matched receive only
    // a moment. A request still pending then is left to MPI, which may still read or write its
    // buffer once the peer resumes, during any MPI call of this process: so the process is
    // fenced (mpi_state.hpp), and makes none again.
    const bool failed = state_->has_failed();
    const deadline until = clock::now() + (!failed    ? send_drain_limit
                                           : is_send_ ? clock::duration::zero()
                                                      : failed_drain_limit);
    for (detail::mpi_piece& p : pieces_) {
      if (p.req == MPI_REQUEST_NULL) continue;
      int flag = 0;
      detail::mpi_poll(
          [&] {
            detail::mpi_serve_receives();
            return MPI_Test(&p.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag != 0;
          },
          until);
      if (p.req != MPI_REQUEST_NULL) {
        state_->mark_failed();
        detail::mpi_fence("rank " + std::to_string(state_->rank) + " gave up a " + describe() +
                          " that MPI still holds");
        break;  // not even MPI_Request_free: the fence stops every call
      }
    }
  }
  pieces_.clear();
  state_.reset();
}

// ---- mpi_backend -------------------------------------------------------------------------------

mpi_backend::mpi_backend() {
  const detail::mpi_lock lock(detail::mpi_mutex());
  if (detail::mpi_fenced()) detail::throw_fenced("mpi: ");
  detail::ensure_initialized();
  MPI_Comm dup = MPI_COMM_NULL;
  detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  state_ = std::make_shared<detail::mpi_state>(dup, true);
  check_launcher_world(state_->size);
}

mpi_backend::mpi_backend(MPI_Comm comm, ownership kind) {
  const detail::mpi_lock lock(detail::mpi_mutex());
  if (detail::mpi_fenced()) detail::throw_fenced("mpi: ");
  int initialized = 0;
  detail::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    throw invalid_argument_error(
        "mpi: adopting a communicator needs MPI initialized first (or use mpi_backend())");
  }
  if (comm == MPI_COMM_NULL) throw invalid_argument_error("mpi: cannot adopt MPI_COMM_NULL");
  if (kind == duplicate) {
    MPI_Comm dup = MPI_COMM_NULL;
    detail::mpi_check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
    state_ = std::make_shared<detail::mpi_state>(dup, true);
  } else {
    state_ = std::make_shared<detail::mpi_state>(comm, false);
  }
}

std::optional<mpi_backend> mpi_backend::split(const std::vector<int>& members,
                                              const std::string& /*name*/) {
  // The smallest member names the group (groups are disjoint); the key is the new rank.
  const int color =
      members.empty() ? MPI_UNDEFINED : *std::min_element(members.begin(), members.end());
  const int key = members.empty() ? 0 : detail::position_in(members, rank(), mpi_backend::name);
  MPI_Comm child = MPI_COMM_NULL;
  {
    const detail::mpi_lock lock(detail::mpi_mutex());
    state_->check_aborted();
    detail::mpi_check(MPI_Comm_split(state_->comm, color, key, &child), "MPI_Comm_split");
  }
  if (child == MPI_COMM_NULL) return std::nullopt;
  return mpi_backend(std::make_shared<detail::mpi_state>(child, true));
}

int mpi_backend::rank() const noexcept { return state_ ? state_->rank : 0; }
int mpi_backend::size() const noexcept { return state_ ? state_->size : 1; }
MPI_Comm mpi_backend::comm() const noexcept { return state_ ? state_->comm : MPI_COMM_NULL; }

mpi_request mpi_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  const detail::mpi_lock lock(detail::mpi_mutex());
  check_peer(peer, state_->size, "isend");
  state_->check_aborted();
  const int wire_tag = detail::mpi_tag(tag, state_->tag_ub);  // refused before anything is sent
  mpi_request r(state_, true, peer, tag, bytes);
  auto* base = static_cast<unsigned char*>(const_cast<void*>(data));  // only read
  r.pieces_.reserve(detail::mpi_pieces::piece_count(bytes));
  detail::mpi_pieces::for_each_piece(bytes, [&](std::size_t off, int n) {
    detail::mpi_piece p;
    p.data = base + off;
    p.bytes = n;
    p.got = n;
    detail::mpi_check(MPI_Isend(p.data, n, MPI_BYTE, peer, wire_tag, state_->comm, &p.req),
                      "MPI_Isend");
    r.pieces_.push_back(p);
  });
  return r;
}

mpi_request mpi_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  return irecv_up_to(data, bytes, nullptr, peer, tag);
}

mpi_request mpi_backend::irecv_up_to(void* data, std::size_t bytes, std::size_t* got, int peer,
                                     tag_t tag) {
  if (got && bytes > static_cast<std::size_t>(INT_MAX)) {
    throw invalid_argument_error("mpi: irecv_up_to: a capacity of " + std::to_string(bytes) +
                                 " bytes is above one MPI message (INT_MAX bytes)");
  }
  const detail::mpi_lock lock(detail::mpi_mutex());
  check_peer(peer, state_->size, "irecv");
  state_->check_aborted();
  const int wire_tag = detail::mpi_tag(tag, state_->tag_ub);
  mpi_request r(state_, false, peer, tag, bytes);
  auto* base = static_cast<unsigned char*>(data);
  r.pieces_.reserve(detail::mpi_pieces::piece_count(bytes));
  const auto add = [&](std::size_t off, int n) {
    detail::mpi_piece p;
    p.data = base + off;
    p.bytes = n;
    p.up_to = got != nullptr;
    r.pieces_.push_back(p);
  };
  if (got) {
    detail::mpi_pieces::for_each_receive_piece(bytes, add);
  } else {
    detail::mpi_pieces::for_each_piece(bytes, add);
  }
  r.got_ = got;
  // Matched by the waits (detail::mpi_serve_receives), never posted to MPI before its size is
  // known. From here the pieces keep their address: r.pieces_ is not resized again.
  detail::queue().pending.push_back(
      {{state_->comm, peer, wire_tag}, r.pieces_.data(), r.pieces_.size(), 0});
  return r;
}

void mpi_backend::abort(const std::string& reason) noexcept {
  const detail::mpi_lock lock(detail::mpi_mutex());
  if (state_) state_->abort(reason);
}

mpi_backend mpi_backend::connect(const config&, const job* given) {
  mpi_backend b;
  if (given && (given->world.size != b.size() || given->world.rank != b.rank())) {
    throw invalid_argument_error(
        std::string("backend ") + name + ": its world is MPI_COMM_WORLD (rank " +
        std::to_string(b.rank()) + " of " + std::to_string(b.size()) + "), not the group of " +
        std::to_string(given->world.size) + " ranks this rank is " +
        std::to_string(given->world.rank) +
        " of; name a backend that connects through a store for this group");
  }
  return b;
}

}  // namespace distcomm
