#include "distcomm/backends/local.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/core/error.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/rendezvous/world.hpp"

namespace distcomm {
namespace detail {

enum op_state : int { queued, copying, done, failed, cancelled };

struct local_op {
  bool is_send = false;
  int owner = 0;  // the rank that posted it
  int peer = 0;   // destination of a send, source of a receive (any_peer: irecv_any)
  tag_t tag = 0;
  const void* src = nullptr;   // sends
  void* dst = nullptr;         // receives
  std::size_t bytes = 0;       // a receive's capacity where `got` is set (irecv_up_to)
  std::size_t* got = nullptr;  // irecv_up_to: where the message's size goes
  int* source = nullptr;       // irecv_any: where the sender's rank goes
  std::atomic<int> state{queued};
  std::string error;                 // written before state becomes `failed`
  std::vector<unsigned char> owned;  // the payload of a detached send (src points into it)

  static constexpr int any_peer = -1;

  std::string describe() const {
    return std::string(is_send ? "send of " : "receive of ") + std::to_string(bytes) + " bytes " +
           (is_send ? "to" : "from") +
           (peer == any_peer ? std::string(" any rank") : " rank " + std::to_string(peer)) +
           " (tag " + std::to_string(tag) + ")";
  }
};

// Messages addressed to one rank: its posted receives and the sends nobody received yet.
struct mailbox {
  std::mutex mu;
  std::deque<std::shared_ptr<local_op>> recvs;
  std::deque<std::shared_ptr<local_op>> sends;
};

// Where a rank sleeps while waiting for its requests.
struct rank_signal {
  std::mutex mu;
  std::condition_variable cv;
};

struct local_world_state {
  explicit local_world_state(int n)
      : size(n),
        in_ptrs(static_cast<std::size_t>(n)),
        out_ptrs(static_cast<std::size_t>(n)),
        arrival(static_cast<std::size_t>(n), 0),
        left(static_cast<std::size_t>(n), 0) {
    for (int i = 0; i < n; ++i) {
      boxes.push_back(std::make_unique<mailbox>());
      signals.push_back(std::make_unique<rank_signal>());
    }
  }

  int size;
  std::vector<std::unique_ptr<mailbox>> boxes;  // by destination rank

  // Sub-worlds being made by split(): the first member to arrive makes it, the last one to take
  // it removes the entry.
  std::mutex split_mu;
  std::map<std::string, std::pair<std::shared_ptr<local_world_state>, int>> splits;
  std::vector<std::unique_ptr<rank_signal>> signals;           // by owner rank
  std::shared_ptr<store> kv = std::make_shared<hash_store>();  // group_store()

  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  std::string abort_reason;

  // Shared-memory collectives: a generation barrier plus one published (in, out) pair per rank.
  std::mutex sync_mu;
  std::condition_variable sync_cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<const void*> in_ptrs;
  std::vector<void*> out_ptrs;
  std::vector<std::uint64_t> arrival;  // generation + 1 each rank last arrived at
  std::vector<std::uint64_t> left;     // generation + 1 each rank last timed out in and left

  std::string reason() {
    std::lock_guard<std::mutex> lk(abort_mu);
    return abort_reason;
  }

  [[noreturn]] void throw_aborted(int rank) {
    throw peer_lost_error("local: rank " + std::to_string(rank) +
                          " cannot continue, the world was aborted: " + reason());
  }

  void finish(local_op& op, op_state s) {
    op.state.store(s, std::memory_order_release);
    rank_signal& sig = *signals[static_cast<std::size_t>(op.owner)];
    // Taking the waiter's mutex orders the store before its predicate check: no lost wake-up.
    { std::lock_guard<std::mutex> lk(sig.mu); }
    sig.cv.notify_all();
  }

  // Copies one matched pair outside any lock. Both ops are in state `copying`.
  void transfer(local_op& send, local_op& recv) {
    if (recv.got ? send.bytes > recv.bytes : send.bytes != recv.bytes) {
      const std::string msg = "local: size mismatch between rank " + std::to_string(send.owner) +
                              " sending " + std::to_string(send.bytes) + " bytes and rank " +
                              std::to_string(recv.owner) + " expecting " +
                              (recv.got ? "at most " : "") + std::to_string(recv.bytes) +
                              " bytes (tag " + std::to_string(send.tag) +
                              "): the ranks called different collectives or sizes";
      send.error = msg;
      recv.error = msg;
      finish(send, failed);
      finish(recv, failed);
      return;
    }
    if (send.bytes != 0) std::memcpy(recv.dst, send.src, send.bytes);
    if (recv.got) *recv.got = send.bytes;
    if (recv.source) *recv.source = send.owner;
    finish(send, done);
    finish(recv, done);
  }
};

}  // namespace detail

namespace {

using detail::local_op;
using detail::local_world_state;

// The first op of `q` (posting order) on `tag` whose owner (match_owner) or peer is `peer_field`;
// any_peer on either side matches every rank: a receive from any rank takes the first send to
// arrive, and a send the first receive from its rank or from any.
std::shared_ptr<local_op> find_and_take(std::deque<std::shared_ptr<local_op>>& q, int peer_field,
                                        bool match_owner, tag_t tag) {
  for (auto it = q.begin(); it != q.end(); ++it) {
    const local_op& o = **it;
    const int who = match_owner ? o.owner : o.peer;
    const bool from =
        who == peer_field || peer_field == local_op::any_peer || who == local_op::any_peer;
    if (from && o.tag == tag) {
      std::shared_ptr<local_op> found = std::move(*it);
      q.erase(it);
      found->state.store(detail::copying, std::memory_order_relaxed);
      return found;
    }
  }
  return nullptr;
}

// Reduces [offset, offset + count) of every rank's input, in rank order, into dst.
void fold_slice(void* dst, const std::vector<const void*>& in, std::size_t offset_bytes,
                std::size_t count, dtype t, reduce_op op) {
  std::vector<const void*> at(in.size());
  for (std::size_t r = 0; r < in.size(); ++r) {
    at[r] = static_cast<const unsigned char*>(in[r]) + offset_bytes;
  }
  fold(dst, at.data(), at.size(), count, t, op);
}

void check_peer(const char* what, int peer, int size) {
  if (peer < 0 || peer >= size) {
    throw invalid_argument_error(std::string("local: ") + what + " peer " + std::to_string(peer) +
                                 " is not a rank of this world (size " + std::to_string(size) +
                                 ")");
  }
}

}  // namespace

// ---- local_request ---------------------------------------------------------------------------

local_request& local_request::operator=(local_request&& other) noexcept {
  if (this != &other) {
    cancel();
    world_ = std::move(other.world_);
    op_ = std::move(other.op_);
  }
  return *this;
}

local_request::~local_request() { cancel(); }

void local_request::cancel() noexcept {
  if (!op_) return;
  local_op& op = *op_;
  if (op.state.load(std::memory_order_acquire) == detail::queued) {
    detail::mailbox& box =
        *world_->boxes[static_cast<std::size_t>(op.is_send ? op.peer : op.owner)];
    std::lock_guard<std::mutex> lk(box.mu);
    if (op.state.load(std::memory_order_relaxed) == detail::queued) {
      auto& q = op.is_send ? box.sends : box.recvs;
      q.erase(std::remove(q.begin(), q.end(), op_), q.end());
      op.state.store(detail::cancelled, std::memory_order_relaxed);
    }
  }
  // Another thread is copying to or from our buffer right now: let it finish (it is a memcpy).
  while (op.state.load(std::memory_order_acquire) == detail::copying) std::this_thread::yield();
  op_.reset();
  world_.reset();
}

bool local_request::test() {
  if (!op_) return true;
  const int s = op_->state.load(std::memory_order_acquire);
  if (s == detail::done) return true;
  if (s == detail::failed) throw mismatch_error(op_->error);
  if (world_->aborted.load(std::memory_order_acquire)) {
    auto keep = world_;
    const int owner = op_->owner;
    cancel();
    keep->throw_aborted(owner);
  }
  return false;
}

void local_request::wait(deadline until) {
  if (!op_) return;
  // A short spin catches partners that are already running on the other core without paying
  // for a sleep and wake-up.
  for (int i = 0; i < 64; ++i) {
    if (op_->state.load(std::memory_order_acquire) >= detail::done) break;
    std::this_thread::yield();
  }
  local_op& op = *op_;
  local_world_state& w = *world_;
  detail::rank_signal& sig = *w.signals[static_cast<std::size_t>(op.owner)];
  std::unique_lock<std::mutex> lk(sig.mu);
  for (;;) {
    const int s = op.state.load(std::memory_order_acquire);
    if (s == detail::done) {
      lk.unlock();
      op_.reset();
      world_.reset();
      return;
    }
    if (s == detail::failed) throw mismatch_error(op.error);
    if (w.aborted.load(std::memory_order_acquire)) {
      lk.unlock();
      auto keep = world_;
      const int owner = op.owner;
      cancel();
      keep->throw_aborted(owner);
    }
    if (sig.cv.wait_until(lk, until) == std::cv_status::timeout &&
        op.state.load(std::memory_order_acquire) < detail::done &&
        !w.aborted.load(std::memory_order_acquire)) {
      lk.unlock();
      const std::string what = op.describe();
      const int owner = op.owner;
      cancel();  // completes the request if the copy raced with the deadline
      throw timeout_error("local: rank " + std::to_string(owner) + ": " + what +
                          " did not complete before the deadline (DISTCOMM_TIMEOUT); the peer "
                          "is stuck, dead or called a different collective");
    }
  }
}

// ---- local_backend ---------------------------------------------------------------------------

int local_backend::size() const noexcept { return world_->size; }

local_request local_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  return local_request(world_, post_send(data, bytes, peer, tag, {}));
}

void local_backend::send_detached(const void* data, std::size_t bytes, int peer, tag_t tag) {
  const auto* p = static_cast<const unsigned char*>(data);
  // No request: nothing cancels it, and the op owns its bytes until the peer takes them.
  (void)post_send(nullptr, bytes, peer, tag, std::vector<unsigned char>(p, p + bytes));
}

std::shared_ptr<detail::local_op> local_backend::post_send(const void* data, std::size_t bytes,
                                                           int peer, tag_t tag,
                                                           std::vector<unsigned char> owned) {
  check_peer("isend", peer, world_->size);
  if (world_->aborted.load(std::memory_order_acquire)) world_->throw_aborted(rank_);
  auto op = std::make_shared<local_op>();
  op->is_send = true;
  op->owner = rank_;
  op->peer = peer;
  op->tag = tag;
  op->owned = std::move(owned);
  op->src = data != nullptr ? data : op->owned.data();
  op->bytes = bytes;
  detail::mailbox& box = *world_->boxes[static_cast<std::size_t>(peer)];
  std::shared_ptr<local_op> match;
  {
    std::lock_guard<std::mutex> lk(box.mu);
    match = find_and_take(box.recvs, rank_, /*match_owner=*/false, tag);
    if (match) {
      op->state.store(detail::copying, std::memory_order_relaxed);
    } else {
      box.sends.push_back(op);
    }
  }
  if (match) world_->transfer(*op, *match);
  return op;
}

local_request local_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  return irecv_up_to(data, bytes, nullptr, peer, tag);
}

local_request local_backend::irecv_up_to(void* data, std::size_t bytes, std::size_t* got, int peer,
                                         tag_t tag) {
  check_peer("irecv", peer, world_->size);
  return post_recv(data, bytes, got, nullptr, peer, tag);
}

local_request local_backend::irecv_any(void* data, std::size_t bytes, int* source, tag_t tag) {
  return post_recv(data, bytes, nullptr, source, local_op::any_peer, tag);
}

local_request local_backend::post_recv(void* data, std::size_t bytes, std::size_t* got, int* source,
                                       int peer, tag_t tag) {
  if (world_->aborted.load(std::memory_order_acquire)) world_->throw_aborted(rank_);
  auto op = std::make_shared<local_op>();
  op->owner = rank_;
  op->peer = peer;
  op->tag = tag;
  op->dst = data;
  op->bytes = bytes;
  op->got = got;
  op->source = source;
  detail::mailbox& box = *world_->boxes[static_cast<std::size_t>(rank_)];
  std::shared_ptr<local_op> match;
  {
    std::lock_guard<std::mutex> lk(box.mu);
    match = find_and_take(box.sends, peer, /*match_owner=*/true, tag);
    if (match) {
      op->state.store(detail::copying, std::memory_order_relaxed);
    } else {
      box.recvs.push_back(op);
    }
  }
  if (match) world_->transfer(*match, *op);
  return local_request(world_, std::move(op));
}

void local_backend::abort(const std::string& reason) noexcept {
  local_world_state& w = *world_;
  {
    std::lock_guard<std::mutex> lk(w.abort_mu);
    if (w.aborted.load()) return;  // keep the first reason: it is the cause
    try {
      w.abort_reason = "rank " + std::to_string(rank_) + " failed: " + reason;
    } catch (...) {
    }
    w.aborted.store(true, std::memory_order_release);
  }
  for (auto& sig : w.signals) {
    { std::lock_guard<std::mutex> lk(sig->mu); }
    sig->cv.notify_all();
  }
  { std::lock_guard<std::mutex> lk(w.sync_mu); }
  w.sync_cv.notify_all();
}

void local_backend::sync(const char* what, deadline until) {
  local_world_state& w = *world_;
  std::unique_lock<std::mutex> lk(w.sync_mu);
  if (w.aborted.load(std::memory_order_acquire)) {
    lk.unlock();
    w.throw_aborted(rank_);
  }
  const std::uint64_t gen = w.generation;
  w.arrival[static_cast<std::size_t>(rank_)] = gen + 1;
  w.left[static_cast<std::size_t>(rank_)] = 0;
  if (++w.arrived == w.size) {
    w.arrived = 0;
    ++w.generation;
    lk.unlock();
    w.sync_cv.notify_all();
    return;
  }
  const bool ok = w.sync_cv.wait_until(
      lk, until, [&] { return w.generation != gen || w.aborted.load(std::memory_order_acquire); });
  if (w.generation != gen) return;
  if (w.aborted.load(std::memory_order_acquire)) {
    lk.unlock();
    w.throw_aborted(rank_);
  }
  if (!ok) {
    std::string missing, gone;  // never arrived; arrived, timed out and left
    for (int r = 0; r < w.size; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (w.arrival[i] != gen + 1) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      } else if (w.left[i] == gen + 1) {
        gone += (gone.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    // Leave, as a timed-out request is cancelled: a rank arriving later must not complete this
    // synchronisation without us.
    --w.arrived;
    w.left[static_cast<std::size_t>(rank_)] = gen + 1;
    const std::string why =
        missing.empty()
            ? gone + ", which timed out in it earlier and left (DISTCOMM_TIMEOUT)"
            : missing + " (DISTCOMM_TIMEOUT); they are stuck, dead or in a different collective";
    throw timeout_error("local: rank " + std::to_string(rank_) + " timed out in " + what +
                        " waiting for rank(s) " + why);
  }
}

void local_backend::publish_and_sync(const void* in, void* out, const char* what, deadline until) {
  {
    std::lock_guard<std::mutex> lk(world_->sync_mu);
    world_->in_ptrs[static_cast<std::size_t>(rank_)] = in;
    world_->out_ptrs[static_cast<std::size_t>(rank_)] = out;
  }
  sync(what, until);
}

void local_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                     reduce_op op, deadline until) {
  const std::size_t es = dtype_size(t);
  const int p = world_->size;
  if (p == 1) {
    if (in != out && count != 0) std::memcpy(out, in, count * es);
    return;
  }
  local_world_state& w = *world_;
  publish_and_sync(in, out, "native allreduce", until);
  const std::vector<const void*> inputs = w.in_ptrs;  // stable until the last sync below
  const std::vector<void*> outputs = w.out_ptrs;
  const block mine = partition(count, static_cast<std::size_t>(p), static_cast<std::size_t>(rank_));
  unsigned char* my_out = static_cast<unsigned char*>(out);
  fold_slice(my_out + mine.begin * es, inputs, mine.begin * es, mine.count, t, op);
  if (op == reduce_op::avg && mine.count != 0) {
    divide(my_out + mine.begin * es, my_out + mine.begin * es, mine.count, t,
           static_cast<std::size_t>(p));
  }
  sync("native allreduce", until);
  for (int q = 0; q < p; ++q) {
    if (q == rank_) continue;
    const block b = partition(count, static_cast<std::size_t>(p), static_cast<std::size_t>(q));
    if (b.count == 0) continue;
    std::memcpy(
        my_out + b.begin * es,
        static_cast<const unsigned char*>(outputs[static_cast<std::size_t>(q)]) + b.begin * es,
        b.count * es);
  }
  sync("native allreduce", until);
}

void local_backend::native_reduce_scatter(const void* in, void* out, std::size_t recv_count,
                                          dtype t, reduce_op op, deadline until) {
  const std::size_t es = dtype_size(t);
  const int p = world_->size;
  if (p == 1) {
    if (in != out && recv_count != 0) std::memcpy(out, in, recv_count * es);
    return;
  }
  publish_and_sync(in, out, "native reduce_scatter", until);
  const std::vector<const void*> inputs = world_->in_ptrs;
  fold_slice(out, inputs, static_cast<std::size_t>(rank_) * recv_count * es, recv_count, t, op);
  if (op == reduce_op::avg && recv_count != 0) {
    divide(out, out, recv_count, t, static_cast<std::size_t>(p));
  }
  sync("native reduce_scatter", until);
}

void local_backend::native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                                     deadline until) {
  const std::size_t bytes = send_count * dtype_size(t);
  publish_and_sync(in, out, "native allgather", until);
  for (int q = 0; q < world_->size; ++q) {
    unsigned char* dst = static_cast<unsigned char*>(out) + static_cast<std::size_t>(q) * bytes;
    const void* src = world_->in_ptrs[static_cast<std::size_t>(q)];
    if (bytes != 0 && src != dst) std::memcpy(dst, src, bytes);
  }
  sync("native allgather", until);
}

void local_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                     deadline until) {
  check_peer("broadcast root", root, world_->size);
  publish_and_sync(data, data, "native broadcast", until);
  const void* src = world_->in_ptrs[static_cast<std::size_t>(root)];
  if (rank_ != root && count != 0) std::memcpy(data, src, count * dtype_size(t));
  sync("native broadcast", until);
}

void local_backend::native_barrier(deadline until) { sync("native barrier", until); }

// ---- local_world -----------------------------------------------------------------------------

std::optional<local_backend> local_backend::split(const std::vector<int>& members,
                                                  const std::string& name) {
  if (members.empty()) return std::nullopt;
  const int me = detail::position_in(members, rank_, local_backend::name);
  std::shared_ptr<detail::local_world_state> child;
  {
    const std::lock_guard<std::mutex> lock(world_->split_mu);
    auto& entry = world_->splits[name];
    if (!entry.first) {
      entry.first = std::make_shared<detail::local_world_state>(static_cast<int>(members.size()));
      entry.second = static_cast<int>(members.size());
    }
    child = entry.first;
    if (--entry.second == 0) world_->splits.erase(name);
  }
  return local_backend(std::move(child), me);
}

std::shared_ptr<store> local_backend::group_store() const { return world_->kv; }

local_world::local_world(int size) {
  if (size < 1) {
    throw invalid_argument_error("local_world: size " + std::to_string(size) +
                                 " must be at least 1");
  }
  state_ = std::make_shared<local_world_state>(size);
}

int local_world::size() const noexcept { return state_->size; }

local_backend local_world::backend(int rank) const {
  check_peer("backend", rank, state_->size);
  return local_backend(state_, rank);
}

void local_world::run(const std::function<void(local_backend)>& body) const {
  std::mutex first_mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(state_->size));
  for (int r = 0; r < state_->size; ++r) {
    threads.emplace_back([&, r] {
      local_backend b(state_, r);
      try {
        body(b);
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> lk(first_mu);
          if (!first) first = std::current_exception();
        }
        b.abort(e.what());
      } catch (...) {
        {
          std::lock_guard<std::mutex> lk(first_mu);
          if (!first) first = std::current_exception();
        }
        b.abort("unknown exception");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// As the backend of a launched process, a world of one: the ranks of a larger job are processes.
local_backend local_backend::connect(const config&, const job* given) {
  const world_info w = given ? given->world : detect_world();
  if (w.size > 1) {
    throw invalid_argument_error(
        std::string("backend ") + name + ": its ranks are threads of one process, but " +
        to_string(w.launcher) + " started this process as rank " + std::to_string(w.rank) + " of " +
        std::to_string(w.size) +
        "; name a backend whose ranks are processes (DISTCOMM_BACKEND; distcomm-run --help lists "
        "them), or run the ranks as threads with distcomm::local_world");
  }
  return local_world(1).backend(0);
}

}  // namespace distcomm
