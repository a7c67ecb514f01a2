#include "distcomm/backends/shm.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/group/members.hpp"
#include "distcomm/log.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"
#include "distcomm/strategy/table.hpp"
#include "segment.hpp"
#include "single_copy.hpp"

namespace distcomm {
namespace detail {

namespace {

constexpr std::size_t header_bytes = 16;  // a message's tag and size, ahead of its bytes
// A waiter polls this long before it sleeps on its futex: a peer on another core usually
// answers within it, and a sleep costs a futex wake-up on both sides (about 5-10 us here).
constexpr std::chrono::microseconds spin_for{20};
// Allreduces up to this size take one arrival, every rank folding every input (native_allreduce);
// larger ones split the fold among the ranks, at the cost of a second arrival.
constexpr std::size_t one_arrival_bytes = std::size_t{8} << 10;
// With DISTCOMM_SHM_SINGLE_COPY=on, collectives of at least this many bytes read the peers'
// buffers straight from their processes (single_copy.hpp): three arrivals and a system call per
// peer and piece, against two copies of every byte through the staging areas. Off by default:
// on the 2-core VM of docs/PERFORMANCE.md ("Single copy") process_vm_readv moves 12-14 GB/s
// where memcpy moves 50-120 GB/s in cache, and the staged path wins at every size.
constexpr std::size_t single_copy_bytes = std::size_t{256} << 10;
// An allreduce folds what it reads of the peers in pieces of this many bytes per peer, so that
// they are still in cache when folded (a quarter of that VM's 1 MiB L2).
constexpr std::size_t single_copy_piece = std::size_t{256} << 10;
// An arrival polls the peers' counters this many times, with a pause between, before it waits
// the general way (await): about 1-10 us, by how long the processor's pause is.
constexpr int quick_polls = 256;
// A sleeping waiter wakes at least this often to see whether a peer it waits for has exited.
constexpr std::chrono::milliseconds liveness_every{10};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

void ring_write(unsigned char* data, std::size_t cap, std::uint64_t pos, const void* src,
                std::size_t n) {
  const std::size_t off = static_cast<std::size_t>(pos % cap);
  const std::size_t first = std::min(n, cap - off);
  std::memcpy(data + off, src, first);
  if (n > first) std::memcpy(data, static_cast<const unsigned char*>(src) + first, n - first);
}

void ring_read(const unsigned char* data, std::size_t cap, std::uint64_t pos, void* dst,
               std::size_t n) {
  const std::size_t off = static_cast<std::size_t>(pos % cap);
  const std::size_t first = std::min(n, cap - off);
  std::memcpy(dst, data + off, first);
  if (n > first) std::memcpy(static_cast<unsigned char*>(dst) + first, data, n - first);
}

// The largest ring or chunk: 1 GiB, far above any measured gain (docs/PERFORMANCE.md), and far
// from where the segment's size (a ring per ordered pair) would overflow.
constexpr std::size_t setting_bytes_limit = std::size_t{1} << 30;

std::size_t setting_bytes(std::size_t given, const char* variable, std::size_t fallback,
                          std::size_t at_least) {
  std::size_t v = given;
  if (v == 0) {
    const char* env = config::read_variable(variable);
    v = env != nullptr && *env != '\0' ? parse_bytes(env, variable) : fallback;
  }
  if (v < at_least || v > setting_bytes_limit) {
    throw invalid_argument_error(std::string("shm: ") + variable + " is " + std::to_string(v) +
                                 " bytes; it must be at least " + std::to_string(at_least) +
                                 " and at most " + std::to_string(setting_bytes_limit) + " (1G)");
  }
  return (v + shm::line - 1) / shm::line * shm::line;
}

}  // namespace

enum class shm_op_state { pending, done, failed, cancelled };

struct shm_op {
  bool is_send = false;
  bool any = false;  // irecv_any's: `peer` is -1 until a message matched it
  int peer = 0;
  tag_t tag = 0;
  int* source = nullptr;    // irecv_any's: where the sender's rank goes
  std::uint64_t order = 0;  // a receive's place among this rank's (shm_state::receives)
  std::size_t bytes = 0;
  const unsigned char* src = nullptr;  // a send's next byte to write
  unsigned char* dst = nullptr;        // a receive's buffer
  std::size_t moved = 0;
  bool header_written = false;  // a send
  shm_op_state state = shm_op_state::pending;
  std::exception_ptr failure;              // when failed
  std::unique_ptr<unsigned char[]> owned;  // a detached or cancelled send's bytes

  std::string describe() const {
    return std::string(is_send ? "send of " : "receive of ") + std::to_string(bytes) + " bytes " +
           (is_send ? "to" : "from") +
           (peer < 0 ? std::string(" any rank") : " rank " + std::to_string(peer)) + " (tag " +
           std::to_string(tag) + ")";
  }
};

namespace {

// A message that arrived before its receive was posted, copied aside.
struct unexpected_msg {
  tag_t tag = 0;
  std::uint64_t arrival = 0;  // its place among every peer's (shm_state::arrivals)
  std::size_t bytes = 0;
  std::unique_ptr<unsigned char[]> data;
  bool complete = false;
  std::shared_ptr<shm_op> claimed;  // a receive posted while the bytes were still arriving
};

// What comes from one peer.
struct inbound {
  std::deque<std::shared_ptr<shm_op>> posted;  // receives no message matched yet, in order
  std::list<unexpected_msg> unexpected;        // in arrival order
  // The message being read from the ring.
  bool reading = false;
  tag_t tag = 0;
  std::size_t bytes = 0;
  std::size_t moved = 0;
  std::shared_ptr<shm_op> into;     // the receive it goes to, or
  unexpected_msg* aside = nullptr;  // where it is kept until one is posted, or neither: dropped
};

// What goes to one peer: sends in posting order, the first one being written.
struct outbound {
  std::deque<std::shared_ptr<shm_op>> queue;
};

}  // namespace

struct shm_state {
  std::mutex mu;  // the queues below, and progress()
  int rank = 0;
  int size = 1;
  std::vector<shm::segment> seg;  // every rank's, this one's included
  std::vector<shm::process_watch> watch;
  std::deque<inbound> in;  // by peer (a deque: an inbound does not move)
  std::deque<outbound> out;
  std::deque<std::shared_ptr<shm_op>> any_posted;  // irecv_any's no message matched yet, in order
  std::uint64_t receives = 0;  // receives posted: which of two that match a message came first
  std::uint64_t arrivals = 0;  // messages set aside: which came first, for irecv_any
  std::shared_ptr<store> kv;   // owned: children are made over it (split, group_store)
  std::string prefix;
  shm_options opts;
  std::uint64_t generation = 0;  // collectives entered
  std::uint64_t staged = 0;      // chunks staged: the halves of the areas alternate
  check::deferred_agreement* deferred = nullptr;  // carried by the next arrival (defer_agreement)
  std::uint64_t staged_at_defer = 0;              // `staged` when it was handed over
  std::string own_name;                           // until unlinked
  bool connected = false;                         // every peer's segment mapped
  std::vector<const void*> inputs;  // a fold's inputs, one per rank (no allocation per call)
  // Single copy (single_copy.hpp): taken by every rank or by none, decided at start-up; why not,
  // where not; the peers' pieces an allreduce folds; the word the peers' probe reads.
  bool single_copy = false;
  std::string copy_path;
  std::vector<unsigned char> pieces;
  std::uint64_t probe_word = 0;
  bool aborted = false;
  std::string abort_reason;
  clock::time_point next_liveness_check{};  // of test()

  shm::header& me() const { return seg[static_cast<std::size_t>(rank)].head(); }
  shm::segment& of(int q) { return seg[static_cast<std::size_t>(q)]; }

  ~shm_state() {
    // Detached sends still queued get a moment to move (backend.hpp: delivered after the
    // backend is gone); the segments stay mapped by the peers that read them.
    const auto until = clock::now() + std::chrono::milliseconds(100);
    for (; connected;) {
      bool queued = false;
      {
        const std::lock_guard<std::mutex> lock(mu);
        try {
          if (!aborted) progress();
        } catch (...) {
          break;  // a peer failed or wrote garbage: nothing more leaves (no throw from here)
        }
        for (const outbound& o : out) queued = queued || !o.queue.empty();
      }
      if (!queued || aborted || clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!own_name.empty()) shm::unlink(own_name);
  }

  // ---- point-to-point, under mu ------------------------------------------------------------

  void progress() {
    for (int d = 0; d < size; ++d) {
      if (d != rank) push(d);
    }
    for (int s = 0; s < size; ++s) {
      if (s != rank) pull(s);
    }
  }

  // Writes what fits of the queued sends to d into the ring.
  void push(int d) {
    outbound& o = out[static_cast<std::size_t>(d)];
    if (o.queue.empty()) return;
    shm::segment& mine = of(rank);
    shm::ring_header& r = mine.ring(d);
    unsigned char* data = mine.ring_data(d);
    const std::size_t cap = mine.ring_bytes();
    std::uint64_t head = r.head.load(std::memory_order_relaxed);
    const std::uint64_t tail = r.tail.load(std::memory_order_acquire);
    check_ring(d, rank, head, tail, cap);
    const std::uint64_t first = head;
    while (!o.queue.empty()) {
      shm_op& op = *o.queue.front();
      std::size_t space = cap - static_cast<std::size_t>(head - tail);
      if (!op.header_written) {
        if (space < header_bytes) break;
        const std::uint64_t h[2] = {op.tag, op.bytes};
        ring_write(data, cap, head, h, header_bytes);
        head += header_bytes;
        space -= header_bytes;
        op.header_written = true;
      }
      const std::size_t n = std::min(space, op.bytes - op.moved);
      if (n != 0) {
        ring_write(data, cap, head, op.src, n);
        op.src += n;
        op.moved += n;
        head += n;
      }
      if (op.moved < op.bytes) break;
      if (op.state == shm_op_state::pending) op.state = shm_op_state::done;
      op.owned.reset();
      o.queue.pop_front();
    }
    if (head != first) {
      r.head.store(head, std::memory_order_release);
      shm::bump(of(d).head());
    }
  }

  // Every word a peer writes into shared memory is checked before it is used as a length or an
  // index: a ring whose read position is not within its size behind its write position was
  // overwritten (`consumer` reads what `producer` writes).
  static constexpr const char* overwritten =
      "the shared memory was overwritten (by another process that can write to /dev/shm, or by "
      "memory corruption); this job cannot go on";
  static constexpr std::uint64_t max_message_bytes = std::uint64_t{1} << 48;
  void check_ring(int consumer, int producer, std::uint64_t head, std::uint64_t tail,
                  std::size_t cap) {
    if (head - tail > cap) {
      corrupted("shm: the ring from rank " + std::to_string(producer) + " to rank " +
                std::to_string(consumer) + " holds write position " + std::to_string(head) +
                " and read position " + std::to_string(tail) + ", not within its " +
                std::to_string(cap) + " bytes: " + overwritten);
    }
  }
  // Under mu: this rank aborts (the peers hear it), and every wait fails with `why` from now on.
  [[noreturn]] void corrupted(const std::string& why) {
    if (!aborted) {
      aborted = true;
      abort_reason = why;
      publish_abort(why);
    }
    throw peer_lost_error(why);
  }
  // Tells the peers this rank aborted, and why (their waits fail at once, naming it).
  void publish_abort(const std::string& reason) noexcept {
    shm::header& h = me();
    const std::size_t n = std::min(reason.size(), sizeof h.reason - 1);
    std::memcpy(h.reason, reason.data(), n);
    h.reason[n] = '\0';
    h.aborted.store(1, std::memory_order_release);
    for (int q = 0; q < size; ++q) shm::bump(of(q).head());
    if (kv) kv->mark_job_failed();
  }

  // Reads what has arrived from s.
  void pull(int s) {
    inbound& in_s = in[static_cast<std::size_t>(s)];
    shm::segment& theirs = of(s);
    shm::ring_header& r = theirs.ring(rank);
    const unsigned char* data = theirs.ring_data(rank);
    const std::size_t cap = theirs.ring_bytes();
    std::uint64_t tail = r.tail.load(std::memory_order_relaxed);
    const std::uint64_t head = r.head.load(std::memory_order_acquire);
    check_ring(rank, s, head, tail, cap);
    const std::uint64_t first = tail;
    for (;;) {
      const std::size_t avail = static_cast<std::size_t>(head - tail);
      if (!in_s.reading) {
        if (avail < header_bytes) break;
        std::uint64_t h[2];
        ring_read(data, cap, tail, h, header_bytes);
        if (h[1] > max_message_bytes) {
          corrupted("shm: the message from rank " + std::to_string(s) + " says it has " +
                    std::to_string(h[1]) + " bytes, more than any message can: " + overwritten);
        }
        tail += header_bytes;
        start_message(s, h[0], static_cast<std::size_t>(h[1]));
        if (in_s.bytes == 0) finish_message(s);
        continue;
      }
      const std::size_t n = std::min(avail, in_s.bytes - in_s.moved);
      if (n == 0) break;
      unsigned char* dst = in_s.into    ? in_s.into->dst + in_s.moved
                           : in_s.aside ? in_s.aside->data.get() + in_s.moved
                                        : nullptr;
      if (dst != nullptr) ring_read(data, cap, tail, dst, n);
      tail += n;
      in_s.moved += n;
      if (in_s.into) in_s.into->moved = in_s.moved;
      if (in_s.moved < in_s.bytes) break;
      finish_message(s);
    }
    if (tail != first) {
      r.tail.store(tail, std::memory_order_release);
      shm::bump(theirs.head());
    }
  }

  void fail(shm_op& op, std::exception_ptr e) {
    op.state = shm_op_state::failed;
    op.failure = std::move(e);
  }

  std::exception_ptr size_mismatch(int s, tag_t tag, std::size_t sent, std::size_t expected) {
    return std::make_exception_ptr(
        mismatch_error("shm: size mismatch between rank " + std::to_string(s) + " sending " +
                       std::to_string(sent) + " bytes and rank " + std::to_string(rank) +
                       " expecting " + std::to_string(expected) + " bytes (tag " +
                       std::to_string(tag) + "): the ranks called different collectives or sizes"));
  }

  void start_message(int s, tag_t tag, std::size_t bytes) {
    inbound& in_s = in[static_cast<std::size_t>(s)];
    in_s.reading = true;
    in_s.tag = tag;
    in_s.bytes = bytes;
    in_s.moved = 0;
    in_s.into = nullptr;
    in_s.aside = nullptr;
    const auto on_tag = [&](const std::shared_ptr<shm_op>& op) { return op->tag == tag; };
    const auto it = std::find_if(in_s.posted.begin(), in_s.posted.end(), on_tag);
    const auto ia = std::find_if(any_posted.begin(), any_posted.end(), on_tag);
    // The receive posted first takes it: one from s, or one from any rank.
    const bool any =
        ia != any_posted.end() && (it == in_s.posted.end() || (*ia)->order < (*it)->order);
    if (any || it != in_s.posted.end()) {
      std::shared_ptr<shm_op> op = any ? *ia : *it;
      if (any) {
        any_posted.erase(ia);
        matched_any(*op, s);
      } else {
        in_s.posted.erase(it);
      }
      if (op->bytes != bytes) {
        fail(*op, size_mismatch(s, tag, bytes, op->bytes));  // the bytes are dropped
      } else {
        in_s.into = std::move(op);
      }
      return;
    }
    // No receive for it yet: set aside, in memory sized by the peer's header (at most 2^48, pull()).
    std::unique_ptr<unsigned char[]> data(new (std::nothrow)
                                              unsigned char[std::max<std::size_t>(bytes, 1)]);
    if (!data) {
      corrupted("shm: rank " + std::to_string(s) + " sent a message of " + std::to_string(bytes) +
                " bytes (tag " + std::to_string(tag) + ") before rank " + std::to_string(rank) +
                " posted its receive, more than this process can set aside: the ranks called "
                "different collectives or sizes, or its memory was overwritten");
    }
    unexpected_msg& m = in_s.unexpected.emplace_back();
    m.tag = tag;
    m.arrival = arrivals++;
    m.bytes = bytes;
    m.data = std::move(data);
    in_s.aside = &m;
  }

  void finish_message(int s) {
    inbound& in_s = in[static_cast<std::size_t>(s)];
    if (in_s.into) {
      if (in_s.into->state == shm_op_state::pending) in_s.into->state = shm_op_state::done;
    } else if (in_s.aside != nullptr) {
      unexpected_msg& m = *in_s.aside;
      m.complete = true;
      if (m.claimed) {
        deliver(m, *m.claimed);
        in_s.unexpected.remove_if([&](const unexpected_msg& x) { return &x == &m; });
      }
    }
    in_s.reading = false;
    in_s.into = nullptr;
    in_s.aside = nullptr;
  }

  static void deliver(unexpected_msg& m, shm_op& op) {
    if (m.bytes != 0) std::memcpy(op.dst, m.data.get(), m.bytes);
    op.moved = m.bytes;
    if (op.state == shm_op_state::pending) op.state = shm_op_state::done;
  }

  // A message set aside that a receive from q on `tag` would take: the first not claimed yet.
  std::list<unexpected_msg>::iterator waiting(int q, tag_t tag) {
    std::list<unexpected_msg>& u = in[static_cast<std::size_t>(q)].unexpected;
    return std::find_if(u.begin(), u.end(),
                        [&](const unexpected_msg& m) { return m.tag == tag && !m.claimed; });
  }

  // A receive from any rank takes a message from s: from now on it is a receive from s.
  static void matched_any(shm_op& op, int s) {
    op.peer = s;
    *op.source = s;
  }

  void post_recv(const std::shared_ptr<shm_op>& op) {
    op->order = receives++;
    if (op->any) {
      // The message that arrived first among those set aside, if any.
      int from = -1;
      for (int q = 0; q < size; ++q) {
        if (q == rank) continue;
        const auto it = waiting(q, op->tag);
        if (it == in[static_cast<std::size_t>(q)].unexpected.end()) continue;
        if (from < 0 || it->arrival < waiting(from, op->tag)->arrival) from = q;
      }
      if (from < 0) {
        any_posted.push_back(op);
        return;
      }
      matched_any(*op, from);
    }
    inbound& in_s = in[static_cast<std::size_t>(op->peer)];
    for (auto it = in_s.unexpected.begin(); it != in_s.unexpected.end(); ++it) {
      if (it->tag != op->tag || it->claimed) continue;
      if (it->bytes != op->bytes) {
        fail(*op, size_mismatch(op->peer, op->tag, it->bytes, op->bytes));
        if (in_s.aside == &*it) in_s.aside = nullptr;  // the rest of it is dropped
        in_s.unexpected.erase(it);
      } else if (it->complete) {
        deliver(*it, *op);
        in_s.unexpected.erase(it);
      } else {
        it->claimed = op;
      }
      return;
    }
    in_s.posted.push_back(op);
  }

  // A pending request given up by its owner: the caller's buffer is not touched afterwards.
  void cancel(const std::shared_ptr<shm_op>& op) {
    if (op->state != shm_op_state::pending) return;
    op->state = shm_op_state::cancelled;
    if (op->is_send) {
      outbound& o = out[static_cast<std::size_t>(op->peer)];
      if (!op->header_written) {
        o.queue.erase(std::remove(o.queue.begin(), o.queue.end(), op), o.queue.end());
      } else if (!op->owned) {
        // Its header and first bytes are in the ring: the rest goes from a copy.
        const std::size_t left = op->bytes - op->moved;
        op->owned.reset(new unsigned char[std::max<std::size_t>(left, 1)]);
        if (left != 0) std::memcpy(op->owned.get(), op->src, left);
        op->src = op->owned.get();
      }
      return;
    }
    if (op->peer < 0) {  // from any rank, and none matched it
      any_posted.erase(std::remove(any_posted.begin(), any_posted.end(), op), any_posted.end());
      return;
    }
    inbound& in_s = in[static_cast<std::size_t>(op->peer)];
    in_s.posted.erase(std::remove(in_s.posted.begin(), in_s.posted.end(), op), in_s.posted.end());
    if (in_s.into == op) in_s.into = nullptr;  // the rest of the message is dropped
    for (unexpected_msg& m : in_s.unexpected) {
      if (m.claimed == op) m.claimed = nullptr;  // the next receive of that tag gets it
    }
  }

  // ---- waiting ----------------------------------------------------------------------------

  [[noreturn]] void throw_aborted() const {
    throw peer_lost_error("shm: rank " + std::to_string(rank) +
                          " cannot continue, it was aborted: " + abort_reason);
  }

  [[noreturn]] void throw_lost(const shm_op& op) const {
    throw peer_lost_error("shm: rank " + std::to_string(op.peer) +
                          " exited (or was killed) before the " + op.describe() + " completed, " +
                          std::to_string(op.moved) + " bytes moved");
  }

  // peer_lost_error when q aborted.
  void check_aborted(int q) const {
    const shm::header& h = seg[static_cast<std::size_t>(q)].head();
    if (h.aborted.load(std::memory_order_acquire) != 0) {
      throw peer_lost_error("shm: rank " + std::to_string(q) + " aborted: " +
                            std::string(h.reason, strnlen(h.reason, sizeof h.reason)));
    }
  }

  // Between polls, without mu: peer_lost_error when the rank `op` waits for aborted, or (slow: a
  // system call per rank) exited before it completed, what it wrote before going read first.
  // True when that reading completed it. A receive from any rank that no message matched yet
  // waits for every peer: one that aborted fails it, and it is lost once every peer exited.
  bool check_alive(shm_op& op, bool slow) {
    int q = op.peer;
    if (op.any) {
      const std::lock_guard<std::mutex> lock(mu);
      q = op.peer;
    }
    // The ranks it waits for: q, or every other one.
    const int first = q < 0 ? 0 : q;
    const int last = q < 0 ? size - 1 : q;
    for (int p = first; p <= last; ++p) {
      if (p != rank) check_aborted(p);
    }
    if (!slow) return false;
    for (int p = first; p <= last; ++p) {
      if (p != rank && !watch[static_cast<std::size_t>(p)].exited()) return false;
    }
    const std::lock_guard<std::mutex> lock(mu);
    progress();
    if (op.state != shm_op_state::pending) return op.state == shm_op_state::done;
    if (op.peer >= 0) throw_lost(op);
    throw peer_lost_error("shm: every other rank exited (or was killed) before the " +
                          op.describe() + " completed");
  }

  // Polls done() (under mu, after progress()) until it holds: spins briefly, then sleeps on this
  // rank's doorbell. check(slow) runs between polls, slow after a sleep (liveness checks cost a
  // system call). False when `until` passed first.
  template <class Done, class Check>
  bool await(Done&& done, Check&& check, deadline until) {
    const auto spin_until = clock::now() + spin_for;
    bool slow = false;
    for (;;) {
      {
        const std::lock_guard<std::mutex> lock(mu);
        if (aborted) throw_aborted();
        progress();
        if (done()) return true;
      }
      check(slow);
      const auto now = clock::now();
      if (now >= until) return false;
      if (now < spin_until) {
        cpu_relax();
        continue;
      }
      shm::header& h = me();
      h.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = h.doorbell.load(std::memory_order_seq_cst);
      bool ready;
      {
        const std::lock_guard<std::mutex> lock(mu);
        progress();
        ready = done();
      }
      if (!ready) {
        shm::futex_wait(h.doorbell, seen,
                        std::min<std::chrono::nanoseconds>(until - now, liveness_every));
      }
      h.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (ready) return true;
      slow = true;
    }
  }

  // Every rank enters collective number `generation + 1`; returns when all have. A deferred
  // agreement rides on it (the collective's first arrival): settled before anything is read.
  void arrive(const char* what, deadline until) {
    if (!exchange_deferred()) arrive_only(what, until);
  }

  // The pending deferred agreement (check/fingerprint.hpp), exchanged in one arrival: the
  // collective's first, or one of its own before an operation that carries none (messages).
  // False when none was pending. On a mismatch every rank raises it after that same arrival, and
  // the areas' halves go back to where the collective found them: the ranks may have been in
  // collectives that stage differently.
  bool exchange_deferred() {
    check::deferred_agreement* d = std::exchange(deferred, nullptr);
    if (d == nullptr || !d->pending) return false;
    d->pending = false;
    const bool same = agree(d->state, d->what, d->until);
    d->exchanged = true;
    if (!same && !d->state.agreed()) {
      staged = staged_at_defer;
      d->settle();
    }
    return true;
  }

  void arrive_only(const char* what, deadline until) {
    const std::uint64_t g = ++generation;
    me().arrived.store(g, std::memory_order_release);
    for (int q = 0; q < size; ++q) {
      if (q != rank) shm::bump(of(q).head());
    }
    const auto missing = [&](int q) {
      return of(q).head().arrived.load(std::memory_order_acquire) < g;
    };
    const auto all_arrived = [&] {
      for (int q = 0; q < size; ++q) {
        if (q != rank && missing(q)) return false;
      }
      return true;
    };
    // Most arrivals come within a microsecond: the counters alone first, without the lock, the
    // message rings or the clock, each of which delays noticing the last one (await below).
    for (int spin = 0; spin < quick_polls; ++spin) {
      if (all_arrived()) return;
      cpu_relax();
    }
    const bool ok = await(
        all_arrived,
        [&](bool slow) {
          for (int q = 0; q < size; ++q) {
            if (q == rank || !missing(q)) continue;
            check_aborted(q);
            if (slow && watch[static_cast<std::size_t>(q)].exited()) {
              throw peer_lost_error("shm: rank " + std::to_string(q) +
                                    " exited (or was killed) before entering " + what +
                                    ", which rank " + std::to_string(rank) + " waits in");
            }
          }
        },
        until);
    if (!ok) {
      std::string late;
      int count = 0;
      for (int q = 0; q < size; ++q) {
        if (q == rank || !missing(q)) continue;
        late += (late.empty() ? "" : ", ") + std::to_string(q);
        ++count;
      }
      throw timeout_error("shm: rank " + std::to_string(rank) + " timed out in " + what + ": " +
                          (count == 1 ? "rank " : "ranks ") + late +
                          " did not enter it before the deadline (DISTCOMM_TIMEOUT); stopped, or "
                          "calling another collective");
    }
  }

  // The agreement before a collective (check/agree.hpp) in shared memory: this rank's digest
  // goes beside its arrival counter, every rank arrives, and each compares the peers' digests with
  // its own; where they differ, the full fingerprints go to the slots of one more generation and
  // each rank merges every peer's into `state`. A slot is rewritten two generations later at the
  // earliest, after every peer has arrived once more, so after it has read it. True where every
  // digest was this rank's (`state` then holds its fingerprint alone: agreed).
  bool agree(check::agreement& state, const char* what, deadline until) {
    const std::uint64_t g = generation + 1;
    const std::uint64_t mine = check::digest(state.lo);  // lo == hi: this rank's alone
    me().digest[g % 2].store(mine, std::memory_order_relaxed);
    arrive_only(what, until);
    // The digests came with the arrivals. Where they differ, every rank sees it: the full
    // fingerprints follow in one more arrival, except where a notice (digest 0, its full text
    // already there) explains it.
    bool same = true;
    bool notice = false;
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      const std::uint64_t theirs = of(q).head().digest[g % 2].load(std::memory_order_relaxed);
      same = same && theirs == mine;
      notice = notice || theirs == 0;
    }
    if (same) return true;
    std::uint64_t full = g;
    if (!notice) {
      full = generation + 1;
      std::memcpy(static_cast<void*>(&me().agreed[full % 2]), &state, sizeof state);
      arrive_only(what, until);
    }
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      if (notice && of(q).head().digest[g % 2].load(std::memory_order_relaxed) != 0) continue;
      check::agreement theirs;
      std::memcpy(static_cast<void*>(&theirs), &of(q).head().agreed[full % 2], sizeof theirs);
      state.merge(theirs);
    }
    return false;
  }

  // A communicator destroyed: its notice stands in for its part of the next agreement.
  void leave(const check::agreement& notice) noexcept {
    const std::uint64_t g = generation + 1;
    std::memcpy(static_cast<void*>(&me().agreed[g % 2]), &notice, sizeof notice);
    me().digest[g % 2].store(0, std::memory_order_relaxed);
    me().arrived.store(g, std::memory_order_release);
    for (int q = 0; q < size; ++q) {
      if (q != rank) shm::bump(of(q).head());
    }
  }

  // Where chunk number `staged` goes: half 0 or 1 of every rank's area.
  int next_half() { return static_cast<int>(staged++ % 2); }
  unsigned char* area(int q, int half) { return of(q).area(half); }
  // alltoall(v) staging: where in rank `from`'s area its piece for rank `to` goes, among the
  // p - 1 pieces for the other ranks (slot `to` below `from`, `to` - 1 above).
  static std::size_t slot(std::size_t to, std::size_t from) { return to < from ? to : to - 1; }

  // ---- single copy ----------------------------------------------------------------------------
  // A collective that reads the peers' buffers: publish() this rank's before its first arrival,
  // read them after it, and arrive once more after the last read, before any rank returns.
  void publish(const void* in, const void* out) {
    me().in_addr.store(reinterpret_cast<std::uintptr_t>(in), std::memory_order_relaxed);
    me().out_addr.store(reinterpret_cast<std::uintptr_t>(out), std::memory_order_relaxed);
  }
  std::uint64_t input_of(int q) { return of(q).head().in_addr.load(std::memory_order_relaxed); }
  std::uint64_t output_of(int q) { return of(q).head().out_addr.load(std::memory_order_relaxed); }
  void read(int q, std::uint64_t from, void* to, std::size_t bytes) {
    if (bytes != 0) shm::read_peer(of(q).head().pid, q, from, to, bytes);
  }
  unsigned char* piece(int q) {
    return pieces.data() + static_cast<std::size_t>(q) * single_copy_piece;
  }
};

}  // namespace detail

using detail::shm_op;
using detail::shm_op_state;
using detail::shm_state;

// ---- request ------------------------------------------------------------------------------

shm_request& shm_request::operator=(shm_request&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    op_ = std::move(other.op_);
  }
  return *this;
}

shm_request::~shm_request() { release(); }

void shm_request::release() noexcept {
  if (!op_) return;
  {
    const std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancel(op_);
  }
  op_.reset();
  state_.reset();
}

bool shm_request::test() {
  if (!op_) return true;
  bool slow = false;
  {
    const std::lock_guard<std::mutex> lock(state_->mu);
    if (op_->state == shm_op_state::pending && !state_->aborted) state_->progress();
    switch (op_->state) {
      case shm_op_state::done:
        return true;
      case shm_op_state::failed:
        std::rethrow_exception(op_->failure);
      default:
        break;
    }
    if (state_->aborted) state_->throw_aborted();
    // Whether the peer is still there costs a system call: asked at most every few milliseconds.
    const auto now = clock::now();
    if (now >= state_->next_liveness_check) {
      state_->next_liveness_check = now + detail::liveness_every;
      slow = true;
    }
  }
  return state_->check_alive(*op_, slow);
}

void shm_request::wait(deadline until) {
  if (!op_) return;
  shm_state& s = *state_;
  shm_op& op = *op_;
  const bool ok = s.await(
      [&] {
        if (op.state == shm_op_state::failed) std::rethrow_exception(op.failure);
        return op.state == shm_op_state::done;
      },
      [&](bool slow) { (void)s.check_alive(op, slow); }, until);
  if (!ok) {
    std::string what, who;
    std::size_t moved = 0;
    {
      const std::lock_guard<std::mutex> lock(s.mu);
      what = op.describe();
      who = op.peer < 0 ? "no rank sent" : "rank " + std::to_string(op.peer) + " did not complete";
      moved = op.moved;
    }
    release();
    throw timeout_error("shm: " + what + " timed out: " + who +
                        " it before the deadline (DISTCOMM_TIMEOUT); " + std::to_string(moved) +
                        " bytes moved");
  }
}

// ---- backend ------------------------------------------------------------------------------

shm_backend::shm_backend(const job& j, shm_options opts)
    : shm_backend(j.kv, j.world.rank, j.world.size, std::move(opts)) {}

shm_backend::shm_backend(std::shared_ptr<store> kv, int rank, int size, shm_options opts)
    : state_(std::make_shared<shm_state>()), rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw invalid_argument_error("shm: rank " + std::to_string(rank) +
                                 " is not within a world of size " + std::to_string(size));
  }
  const std::chrono::duration<double> timeout =
      opts.timeout ? *opts.timeout : config::from_env().timeout;
  opts.timeout = timeout;
  opts.ring_bytes =
      detail::setting_bytes(opts.ring_bytes, "DISTCOMM_SHM_RING", std::size_t{1} << 20, 4096);
  // 512 KiB: a chunk and its reduction stay in cache, half this VM's 1 MiB L2 (docs/PERFORMANCE.md,
  // "Each backend's own defaults": ahead of 1 MiB by 5-15% at 1-128 MiB when memory was fast,
  // 1.5-2x when it was slow, 2026-11-28).
  // The floor, 64 bytes a rank: a chunk holds alltoallv's table of counts (16 bytes a rank) and
  // a slot of at least one 8-byte element for each other rank, alltoall's and allgather's a
  // piece of one element a rank (24 bytes a rank at most); below it the pieces were 0 elements
  // (a division by zero from 172 ranks at 4 KiB) or the table outgrew the chunk (from 257).
  opts.chunk_bytes =
      detail::setting_bytes(opts.chunk_bytes, "DISTCOMM_SHM_CHUNK", std::size_t{512} << 10,
                            std::max<std::size_t>(4096, 64 * std::size_t(size)));
  if (!opts.single_copy) {
    const char* single = config::read_variable("DISTCOMM_SHM_SINGLE_COPY");
    const std::string wanted = single != nullptr && *single != '\0' ? single : "off";
    if (wanted != "on" && wanted != "off") {
      throw invalid_argument_error("shm: DISTCOMM_SHM_SINGLE_COPY is '" + wanted +
                                   "'; use on (where every rank may read every other) or off");
    }
    opts.single_copy = wanted == "on";
  }
  if (!kv) {
    if (size != 1) {
      throw invalid_argument_error("shm: a world of " + std::to_string(size) +
                                   " ranks needs a store (bootstrap() gives one)");
    }
    kv = std::make_shared<hash_store>(timeout);
  }
  shm_state& s = *state_;
  s.rank = rank;
  s.size = size;
  s.kv = kv;
  s.prefix = opts.prefix;
  if (s.prefix.empty()) {
    // The n-th shm backend of every rank gets the same prefix.
    s.prefix =
        "distcomm/shm/" + std::to_string(kv->add("distcomm/shm/count/" + std::to_string(rank), 1));
  }
  s.opts = opts;
  s.seg.resize(static_cast<std::size_t>(size));
  s.watch.resize(static_cast<std::size_t>(size));
  s.in.resize(static_cast<std::size_t>(size));
  s.inputs.resize(static_cast<std::size_t>(size));
  s.out.resize(static_cast<std::size_t>(size));

  detail::shm::sweep_stale();
  s.own_name = detail::shm::fresh_name();
  s.of(rank) = detail::shm::segment::create(s.own_name, size, opts.ring_bytes, opts.chunk_bytes);
  std::string no_single = *opts.single_copy ? "" : "off";
  if (no_single.empty() && size > 1) no_single = detail::shm::allow_peer_reads();
  s.probe_word = 0x5348434f50590000ULL ^ static_cast<std::uint64_t>(::getpid());  // "SHCOPY"
  s.me().probe_addr = reinterpret_cast<std::uintptr_t>(&s.probe_word);
  s.me().probe_value = s.probe_word;
  const std::string host = detail::shm::host_identity();
  const std::string pidns = detail::shm::pid_namespace();
  const std::string published = s.own_name + "\n" + host + "\n" + pidns;
  kv->set(s.prefix + "/rank/" + std::to_string(rank), bytes(published.begin(), published.end()));
  std::vector<std::string> keys;
  for (int q = 0; q < size; ++q) keys.push_back(s.prefix + "/rank/" + std::to_string(q));
  store_wait(*kv, keys, timeout);
  // Every rank reads every entry and decides, then all meet before any refuses: the rank hosting
  // the store must not leave (closing it) while another still reads.
  std::vector<std::string> names(static_cast<std::size_t>(size));
  std::string refusal;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    const bytes value = kv->get(keys[static_cast<std::size_t>(q)]);
    const std::string text(value.begin(), value.end());
    const std::size_t a = text.find('\n');
    const std::size_t b = a == std::string::npos ? a : text.find('\n', a + 1);
    if (!refusal.empty()) continue;
    if (b == std::string::npos) {
      refusal = "shm: rank " + std::to_string(q) + " published '" + text + "' under " +
                keys[static_cast<std::size_t>(q)] + ", not a segment name, host and PID namespace";
    } else if (const std::string their_host = text.substr(a + 1, b - a - 1); their_host != host) {
      refusal = "shm: rank " + std::to_string(q) + " runs on " + their_host + ", rank " +
                std::to_string(rank) + " on " + host +
                ": the shm backend connects the ranks of one host (name gloo or ucx for a job "
                "across hosts)";
    } else if (text.substr(b + 1) != pidns) {
      refusal = "shm: rank " + std::to_string(q) + " runs in another PID namespace than rank " +
                std::to_string(rank) +
                " (containers sharing /dev/shm), where its exit could not be noticed; name gloo "
                "or ucx";
    }
    names[static_cast<std::size_t>(q)] = text.substr(0, a);
  }
  if (size > 1) store_barrier(*kv, s.prefix + "/checked", rank, size);
  if (!refusal.empty()) {
    // Rank 0 (which hosts the job's store) waits until every other rank's last call to the store
    // has been answered, so that none sees it vanish instead of this refusal.
    if (rank != 0) {
      kv->set(s.prefix + "/refused/" + std::to_string(rank), bytes{1});
    } else if (size > 1) {
      std::vector<std::string> refused;
      for (int q = 1; q < size; ++q) refused.push_back(s.prefix + "/refused/" + std::to_string(q));
      try {
        store_wait(*kv, refused, std::chrono::duration<double>(5.0));
      } catch (const error&) {
        // a rank that refuses differently, or is gone: nothing to wait for
      }
    }
    throw invalid_argument_error(refusal);
  }
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    s.of(q) = detail::shm::segment::open(names[static_cast<std::size_t>(q)], size, opts.ring_bytes,
                                         opts.chunk_bytes);
    s.watch[static_cast<std::size_t>(q)] = detail::shm::process_watch(s.of(q).head().pid);
    const detail::shm::header& h = s.of(q).head();
    if (no_single.empty()) no_single = detail::shm::probe_peer(h.pid, h.probe_addr, h.probe_value);
  }
  // Single copy where every rank wants it and may read every other: each says what it found.
  if (size > 1) {
    kv->set(s.prefix + "/copy/" + std::to_string(rank), bytes(no_single.begin(), no_single.end()));
  }
  // Once every rank has mapped every segment, the names can go: the memory lives as long as a
  // process maps it, and nothing is left in /dev/shm however the ranks end.
  if (size > 1) store_barrier(*kv, s.prefix + "/mapped", rank, size);
  // A rank that does not want it needs no answer: the other ranks read its "off".
  bool every_rank_may = size > 1 && no_single.empty();
  for (int q = 0; q < size && every_rank_may; ++q) {
    const bytes value = kv->get(s.prefix + "/copy/" + std::to_string(q));
    const std::string why(value.begin(), value.end());
    if (why.empty()) continue;
    every_rank_may = false;
    if (why != "off") {
      s.copy_path =
          "copy in/out (rank " + std::to_string(q) + " may not read its peers: " + why + ")";
    }
  }
  s.single_copy = every_rank_may;
  if (s.single_copy) {
    s.copy_path = "single copy (process_vm_readv)";
    s.pieces.resize(static_cast<std::size_t>(size) * detail::single_copy_piece);
  } else if (s.copy_path.empty()) {
    s.copy_path = "copy in/out";
  }
  if (rank == 0 && size > 1 && log_enabled(log_level::info)) {
    log(log_level::info,
        "shm: " + std::to_string(size) + " ranks, large collectives by " + s.copy_path);
  }
  detail::shm::unlink(s.own_name);
  s.own_name.clear();
  s.connected = true;
}

shm_request shm_backend::isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
  (void)state_->exchange_deferred();
  auto op = std::make_shared<shm_op>();
  op->is_send = true;
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->src = static_cast<const unsigned char*>(data);
  const std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->aborted) state_->throw_aborted();
  state_->out[static_cast<std::size_t>(peer)].queue.push_back(op);
  state_->push(peer);
  return shm_request(state_, std::move(op));
}

shm_request shm_backend::irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
  return post_recv(data, bytes, peer, nullptr, tag);
}

shm_request shm_backend::irecv_any(void* data, std::size_t bytes, int* source, tag_t tag) {
  return post_recv(data, bytes, -1, source, tag);
}

shm_request shm_backend::post_recv(void* data, std::size_t bytes, int peer, int* source,
                                   tag_t tag) {
  (void)state_->exchange_deferred();
  auto op = std::make_shared<shm_op>();
  op->any = peer < 0;
  op->peer = peer;
  op->source = source;
  op->tag = tag;
  op->bytes = bytes;
  op->dst = static_cast<unsigned char*>(data);
  const std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->aborted) state_->throw_aborted();
  state_->post_recv(op);
  if (op->any) {
    state_->progress();
  } else {
    state_->pull(peer);
  }
  return shm_request(state_, std::move(op));
}

void shm_backend::send_detached(const void* data, std::size_t bytes, int peer, tag_t tag) {
  (void)state_->exchange_deferred();
  auto op = std::make_shared<shm_op>();
  op->is_send = true;
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->owned.reset(new unsigned char[std::max<std::size_t>(bytes, 1)]);
  if (bytes != 0) std::memcpy(op->owned.get(), data, bytes);
  op->src = op->owned.get();
  op->state = shm_op_state::cancelled;  // nobody waits for it
  const std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->aborted) return;
  state_->out[static_cast<std::size_t>(peer)].queue.push_back(op);
  state_->push(peer);
}

void shm_backend::abort(const std::string& reason) noexcept {
  shm_state& s = *state_;
  {
    const std::lock_guard<std::mutex> lock(s.mu);
    if (s.aborted) return;
    s.aborted = true;
    s.abort_reason = reason;
  }
  s.publish_abort(reason);
}

// ---- collectives ----------------------------------------------------------------------------
// Chunk by chunk through the staging areas, alternating their halves: a rank writes a half only
// after the arrival that follows every rank's last read of it (the one of the next chunk).

void shm_backend::native_allreduce(const void* in, void* out, std::size_t count, dtype t,
                                   reduce_op op, deadline until) {
  const std::size_t es = dtype_size(t);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  if (size_ == 1) {
    if (in != out && count != 0) std::memcpy(out, in, count * es);
    return;
  }
  shm_state& s = *state_;
  const std::size_t p = static_cast<std::size_t>(size_);
  const std::size_t per = s.opts.chunk_bytes / es;
  std::vector<const void*>& inputs = s.inputs;
  if (count * es <= detail::one_arrival_bytes && count <= per) {
    // Small: one arrival, then every rank folds the whole vector from every area, in rank order
    // (the same bits on every rank): the second arrival costs more than the larger fold saves.
    const int half = s.next_half();
    std::memcpy(s.area(rank_, half), src, count * es);
    s.arrive("native allreduce", until);
    for (std::size_t q = 0; q < p; ++q) inputs[q] = s.area(static_cast<int>(q), half);
    fold(dst, inputs.data(), p, count, t, op);
    if (op == reduce_op::avg) divide(dst, dst, count, t, p);
    return;
  }
  if (s.single_copy && count * es >= detail::single_copy_bytes) {
    // Rank r folds its slice of every rank's input, read in pieces that stay in cache, in rank
    // order into its own output; all arrive; each reads the other slices from their owners'
    // outputs. In place is fine: a rank writes only its own slice while the peers read the others.
    s.publish(in, out);
    s.arrive("native allreduce", until);
    const block mine = partition(count, p, static_cast<std::size_t>(rank_));
    const std::size_t piece = detail::single_copy_piece / es;
    for (std::size_t off = mine.begin; off < mine.begin + mine.count; off += piece) {
      const std::size_t n = std::min(piece, mine.begin + mine.count - off);
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) {
          inputs[static_cast<std::size_t>(q)] = src + off * es;
        } else {
          s.read(q, s.input_of(q) + off * es, s.piece(q), n * es);
          inputs[static_cast<std::size_t>(q)] = s.piece(q);
        }
      }
      fold(dst + off * es, inputs.data(), p, n, t, op);
      if (op == reduce_op::avg) divide(dst + off * es, dst + off * es, n, t, p);
    }
    s.arrive("native allreduce", until);
    for (int q = 0; q < size_; ++q) {
      const block b = partition(count, p, static_cast<std::size_t>(q));
      if (q != rank_) s.read(q, s.output_of(q) + b.begin * es, dst + b.begin * es, b.count * es);
    }
    s.arrive("native allreduce", until);
    return;
  }
  for (std::size_t off = 0; off < count; off += per) {
    const std::size_t n = std::min(per, count - off);
    const int half = s.next_half();
    std::memcpy(s.area(rank_, half), src + off * es, n * es);
    s.arrive("native allreduce", until);
    const block mine = partition(n, p, static_cast<std::size_t>(rank_));
    if (mine.count != 0) {
      for (std::size_t q = 0; q < p; ++q) {
        inputs[q] = s.area(static_cast<int>(q), half) + mine.begin * es;
      }
      unsigned char* slot = s.area(rank_, half) + mine.begin * es;
      fold(slot, inputs.data(), p, mine.count, t, op);
      if (op == reduce_op::avg) divide(slot, slot, mine.count, t, p);
    }
    s.arrive("native allreduce", until);
    for (std::size_t q = 0; q < p; ++q) {
      const block b = partition(n, p, q);
      if (b.count != 0) {
        std::memcpy(dst + (off + b.begin) * es, s.area(static_cast<int>(q), half) + b.begin * es,
                    b.count * es);
      }
    }
  }
}

void shm_backend::native_reduce_scatter(const void* in, void* out, std::size_t recv_count, dtype t,
                                        reduce_op op, deadline until) {
  const std::size_t es = dtype_size(t);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  if (size_ == 1) {
    if (in != out && recv_count != 0) std::memcpy(out, in, recv_count * es);
    return;
  }
  shm_state& s = *state_;
  const std::size_t p = static_cast<std::size_t>(size_);
  const std::size_t per = s.opts.chunk_bytes / (p * es);
  std::vector<const void*>& inputs = s.inputs;
  for (std::size_t off = 0; off < recv_count; off += per) {
    const std::size_t n = std::min(per, recv_count - off);
    const int half = s.next_half();
    unsigned char* mine = s.area(rank_, half);
    for (std::size_t q = 0; q < p; ++q) {
      std::memcpy(mine + q * n * es, src + (q * recv_count + off) * es, n * es);
    }
    s.arrive("native reduce_scatter", until);
    for (std::size_t q = 0; q < p; ++q) {
      inputs[q] = s.area(static_cast<int>(q), half) + static_cast<std::size_t>(rank_) * n * es;
    }
    fold(dst + off * es, inputs.data(), p, n, t, op);
    if (op == reduce_op::avg) divide(dst + off * es, dst + off * es, n, t, p);
  }
}

void shm_backend::native_allgather(const void* in, void* out, std::size_t send_count, dtype t,
                                   deadline until) {
  const std::size_t es = dtype_size(t);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  shm_state& s = *state_;
  const std::size_t p = static_cast<std::size_t>(size_);
  if (size_ == 1) {
    if (in != out && send_count != 0) std::memcpy(out, in, send_count * es);
    return;
  }
  if (s.single_copy && send_count * es * p >= detail::single_copy_bytes) {
    // Every rank reads every peer's input straight into its output.
    s.publish(in, out);
    s.arrive("native allgather", until);
    for (int q = 0; q < size_; ++q) {
      unsigned char* to = dst + static_cast<std::size_t>(q) * send_count * es;
      if (q != rank_) {
        s.read(q, s.input_of(q), to, send_count * es);
      } else if (to != src) {
        std::memmove(to, src, send_count * es);
      }
    }
    s.arrive("native allgather", until);
    return;
  }
  const std::size_t per = s.opts.chunk_bytes / es;
  for (std::size_t off = 0; off < send_count; off += per) {
    const std::size_t n = std::min(per, send_count - off);
    const int half = s.next_half();
    std::memcpy(s.area(rank_, half), src + off * es, n * es);
    s.arrive("native allgather", until);
    for (std::size_t q = 0; q < p; ++q) {
      std::memcpy(dst + (q * send_count + off) * es, s.area(static_cast<int>(q), half), n * es);
    }
  }
}

void shm_backend::native_broadcast(void* data, std::size_t count, dtype t, int root,
                                   deadline until) {
  if (size_ == 1) return;
  const std::size_t es = dtype_size(t);
  auto* buf = static_cast<unsigned char*>(data);
  shm_state& s = *state_;
  if (s.single_copy && count * es >= detail::single_copy_bytes) {
    s.publish(data, data);
    s.arrive("native broadcast", until);
    if (rank_ != root) s.read(root, s.input_of(root), buf, count * es);
    s.arrive("native broadcast", until);
    return;
  }
  const std::size_t per = s.opts.chunk_bytes / es;
  for (std::size_t off = 0; off < count; off += per) {
    const std::size_t n = std::min(per, count - off);
    const int half = s.next_half();
    if (rank_ == root) std::memcpy(s.area(root, half), buf + off * es, n * es);
    s.arrive("native broadcast", until);
    if (rank_ != root) std::memcpy(buf + off * es, s.area(root, half), n * es);
  }
}

void shm_backend::native_alltoall(const void* in, void* out, std::size_t block_count, dtype t,
                                  deadline until) {
  const std::size_t es = dtype_size(t);
  const std::size_t block = block_count * es;
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  if (size_ == 1) {
    if (block != 0) std::memcpy(dst, src, block);
    return;
  }
  shm_state& s = *state_;
  const std::size_t p = static_cast<std::size_t>(size_);
  const std::size_t r = static_cast<std::size_t>(rank_);
  if (s.single_copy && block * p >= detail::single_copy_bytes) {
    // Every rank reads its block of every peer's input straight into its output.
    s.publish(in, out);
    s.arrive("native alltoall", until);
    for (std::size_t q = 0; q < p; ++q) {
      if (q == r) {
        std::memcpy(dst + r * block, src + r * block, block);
      } else {
        s.read(static_cast<int>(q), s.input_of(static_cast<int>(q)) + r * block, dst + q * block,
               block);
      }
    }
    s.arrive("native alltoall", until);
    return;
  }
  // Staged: this rank's own block copied once, straight (after the first arrival, which settles
  // a deferred agreement: nothing is written before it); per chunk, the same piece of every
  // other block, each in its slot of the area (shm_state::slot).
  const auto slot = &shm_state::slot;
  const std::size_t per = s.opts.chunk_bytes / ((p - 1) * es);
  for (std::size_t off = 0; off < block_count; off += per) {
    const std::size_t n = std::min(per, block_count - off);
    const int half = s.next_half();
    unsigned char* mine = s.area(rank_, half);
    for (std::size_t q = 0; q < p; ++q) {
      if (q != r) {
        std::memcpy(mine + slot(q, r) * n * es, src + (q * block_count + off) * es, n * es);
      }
    }
    s.arrive("native alltoall", until);
    if (off == 0) std::memcpy(dst + r * block, src + r * block, block);
    for (std::size_t q = 0; q < p; ++q) {
      if (q != r) {
        std::memcpy(dst + (q * block_count + off) * es,
                    s.area(static_cast<int>(q), half) + slot(r, q) * n * es, n * es);
      }
    }
  }
}

void shm_backend::native_alltoallv(const void* in, const std::size_t* send_counts,
                                   const std::size_t* send_displs, void* out,
                                   const std::size_t* recv_counts, const std::size_t* recv_displs,
                                   dtype t, deadline until) {
  const std::size_t es = dtype_size(t);
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  const std::size_t p = static_cast<std::size_t>(size_);
  const std::size_t r = static_cast<std::size_t>(rank_);
  if (size_ == 1) {
    if (send_counts[0] != recv_counts[0]) {
      throw mismatch_error(check::counts_mismatch_message(0, 0, send_counts[0], recv_counts[0]));
    }
    if (send_counts[0] != 0) {
      std::memmove(dst + recv_displs[0] * es, src + send_displs[0] * es, send_counts[0] * es);
    }
    return;
  }
  shm_state& s = *state_;
  // A chunk's area: this rank's counts (send to each rank, then receive from each, 2p words; in
  // the first chunk only), then a slot of `per` bytes for each other rank (shm_state::slot),
  // holding the next piece of the message to it. The slots follow the counts unpadded: at 2
  // ranks a small message shares their cache line.
  const std::size_t table = 2 * p * sizeof(std::uint64_t);
  const std::size_t per = (s.opts.chunk_bytes - table) / (p - 1) / es * es;
  const auto slot = &shm_state::slot;
  std::size_t chunks = 1;  // every rank learns the same number from every rank's counts
  for (std::size_t k = 0; k < chunks; ++k) {
    const std::size_t off = k * per;  // bytes into each message
    const int half = s.next_half();
    unsigned char* mine = s.area(rank_, half);
    if (k == 0) {
      auto* words = reinterpret_cast<std::uint64_t*>(mine);
      for (std::size_t q = 0; q < p; ++q) {
        words[q] = send_counts[q];
        words[p + q] = recv_counts[q];
      }
    }
    for (std::size_t q = 0; q < p; ++q) {
      const std::size_t bytes = send_counts[q] * es;
      if (q != r && bytes > off) {
        std::memcpy(mine + table + slot(q, r) * per, src + send_displs[q] * es + off,
                    std::min(per, bytes - off));
      }
    }
    s.arrive("native alltoallv", until);
    if (k == 0) {
      const auto table_of = [&](std::size_t q) {
        return reinterpret_cast<const std::uint64_t*>(s.area(static_cast<int>(q), half));
      };
      check::compare_counts(
          p, [&](std::size_t from, std::size_t to) { return table_of(from)[to]; },
          [&](std::size_t to, std::size_t from) { return table_of(to)[p + from]; });
      std::uint64_t most = 0;  // the largest message between two ranks, in bytes
      for (std::size_t from = 0; from < p; ++from) {
        for (std::size_t to = 0; to < p; ++to) {
          if (from != to) most = std::max<std::uint64_t>(most, table_of(from)[to] * es);
        }
      }
      chunks = std::max<std::size_t>(1, (most + per - 1) / per);
      if (send_counts[r] != 0) {
        std::memmove(dst + recv_displs[r] * es, src + send_displs[r] * es, send_counts[r] * es);
      }
    }
    for (std::size_t q = 0; q < p; ++q) {
      const std::size_t bytes = recv_counts[q] * es;
      if (q != r && bytes > off) {
        std::memcpy(dst + recv_displs[q] * es + off,
                    s.area(static_cast<int>(q), half) + table + slot(r, q) * per,
                    std::min(per, bytes - off));
      }
    }
  }
}

void shm_backend::native_barrier(deadline until) {
  if (size_ > 1) state_->arrive("native barrier", until);
}

void shm_backend::defer_agreement(check::deferred_agreement* d) noexcept {
  shm_state& s = *state_;
  s.deferred = d;
  s.staged_at_defer = s.staged;
}

void shm_backend::native_agree(check::agreement& state, const char* what, deadline until) {
  if (size_ > 1) state_->agree(state, what, until);
}

void shm_backend::native_leave(const check::agreement& notice) noexcept {
  shm_state& s = *state_;
  if (size_ > 1 && s.connected && !s.aborted) s.leave(notice);
}

const std::string& shm_backend::copy_path() const { return state_->copy_path; }

std::shared_ptr<store> shm_backend::group_store() const {
  return std::make_shared<prefix_store>(state_->prefix + "/group/", state_->kv);
}

std::optional<shm_backend> shm_backend::split(const std::vector<int>& members,
                                              const std::string& name) {
  if (members.empty()) return std::nullopt;
  const int me = detail::position_in(members, rank_, shm_backend::name);
  shm_options o = state_->opts;
  o.prefix.clear();
  return shm_backend(std::make_shared<prefix_store>(state_->prefix + "/split/" + name, state_->kv),
                     me, static_cast<int>(members.size()), o);
}

shm_backend shm_backend::connect(const config& cfg, const job* given) {
  shm_options o;
  o.timeout = cfg.timeout;
  return shm_backend(given ? *given : shared_bootstrap(cfg), o);
}

}  // namespace distcomm
