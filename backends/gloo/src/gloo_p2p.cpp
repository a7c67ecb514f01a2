// The gloo backend's point-to-point protocol, on gloo's unbound buffers over TCP.
//
// A message of `bytes` from rank S to rank R with tag T travels on two gloo slots derived from T:
//  * bytes <= eager_bytes: one transfer on T's header slot, the size word followed by the payload,
//    copied through a block the backend owns on both sides (gloo's unbound transfers are a
//    rendezvous of notifications and wake-ups; a small copy is far cheaper than a second one).
//    The send is complete for its caller at once; the backend keeps the block until gloo wrote
//    it, and dropping the backend first lets gloo write what is left.
//  * larger: the size word alone on the header slot, then the payload on T's payload slot,
//    straight from the caller's buffer into the caller's buffer (a copy of every byte cost as
//    much as the kernel's own copies: 64 MiB ring allreduce 0.78x of gloo::allreduce with it,
//    1.03x without, 2 ranks on the 2-core VM).
// R's backend keeps header receives posted per (S, T) in blocks of its own, one per pending irecv
// (and one per retracted irecv, see below), and matches arrived messages to irecvs in posting
// order. A large payload's receive is posted only once its size word matched: gloo cannot report
// a size mismatch itself (a larger send fails an assertion on gloo's event-loop thread, a smaller
// one completes silently). A mismatched payload is drained into backend memory, so the next
// message of (S, T) finds the stream where it expects it.
// Matching happens when this rank polls or waits, and gloo signals nothing but the one transfer a
// wait sleeps on: so every poll matches arrived messages on all channels, and a wait sleeps in
// slices from 0.1 ms doubling to abort_poll. A large send completes only once its receiver
// matched it, and the receiver may be waiting for its own large send to this rank.
// Cancelling (destroying) a receive that no message matched yet retracts it: its header receive
// stays posted, and the message that fills it goes to the next irecv of (S, T). A matched receive
// has consumed its message, as in MPI. gloo cannot retract a posted transfer: a cancelled large
// send, or a receive whose payload is arriving, is waited for up to cancel_grace (not at all after
// a failure), then the connection to the peer is closed after telling the peer why.
// No receive is posted ahead of an irecv: a peer's notification for it could reach a connection
// as it closes, and closing a socket with unread bytes resets it, discarding what this rank had
// still to send.
// Waits use our own deadline on the buffer's condition variable: gloo's timed wait closes every
// pair of the context when it times out, which would turn one slow peer into a dead job.
// Failures: abort(reason) sends the reason to every peer (one receive per peer stays posted on a
// slot of its own) before closing the connections, so a peer can say which rank gave up and why
// (e.g. the rank that rank waited for) instead of only "connection closed"; a peer that closes
// without one exited, died or lost its network. A wait that passes its deadline first asks its
// peer what that peer waits for (a probe: one small message per ordered pair of ranks, its
// receive posted at the start like the notices'); a peer inside a wait answers within one sleep
// slice, a stopped one never. Following the answers from rank to rank names the rank at the end
// of the chain, the one that does not answer: in a ring where rank 1 stopped, rank 3 (waiting on
// rank 2, which waits on rank 1) says so instead of blaming rank 2. gloo writes with writev(2),
// which raises SIGPIPE once a peer is gone: SIGPIPE is blocked in gloo's event-loop thread and
// around our calls into gloo, so that a lost peer is an error, not the end of this process.
#include "gloo_p2p.hpp"

#include <gloo/common/error.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "distcomm/core/error.hpp"

namespace distcomm::detail {

namespace {

constexpr std::uint64_t slot_prefix = std::uint64_t{0xD1} << 56;
std::uint64_t slot_of(tag_t tag, bool payload) {
  return slot_prefix | (std::uint64_t{tag} << 1) | (payload ? 1u : 0u);
}

// Abort notices: one slot, one message per ordered pair of ranks.
constexpr std::uint64_t notice_slot = std::uint64_t{0xD2} << 56;
// How long abort() lets its notices leave before closing the connections: a healthy peer takes
// one at once; a stopped one never does, and must not hold up the abort.
constexpr auto notice_send_limit = std::chrono::milliseconds(100);

// Probes and their answers: one slot each, one message per ordered pair of ranks.
constexpr std::uint64_t probe_slot = std::uint64_t{0xD3} << 56;
constexpr std::uint64_t answer_slot = std::uint64_t{0xD4} << 56;
// The closing handshake (say_goodbye): one slot, one word per ordered pair of ranks.
constexpr std::uint64_t bye_slot = std::uint64_t{0xD5} << 56;
// How long teardown waits for a peer to say it is done too. A peer in its last collective gets
// there in milliseconds; one that keeps its communicator longer (it destroys its own later)
// costs this rank that much at most, so it is short of the deadline.
constexpr auto close_linger = std::chrono::seconds(5);

// How long a wait sleeps before looking at the abort flag, the notices and the probes again.
constexpr auto abort_poll = std::chrono::milliseconds(50);
// How long a timed-out wait waits for the answer to a probe. A peer inside a wait answers within
// one sleep (abort_poll) once the scheduler runs it, one probing a peer itself within probe_nap
// (measured with 4 ranks on the 2-core VM, rank 1 stopped inside a ring or tree allreduce: every
// answer within 0.1-5.3 ms); a stopped one never does, so this is what a stopped rank adds to
// the time to the first error (fault tests: 10.0 -> 10.3 s with DISTCOMM_TIMEOUT=10).
constexpr auto probe_limit = std::chrono::milliseconds(250);
// How often a rank waiting for an answer looks at the notices and answers probes itself.
constexpr auto probe_nap = std::chrono::milliseconds(5);
// How long teardown waits for detached sends nobody has taken (gloo_state::~gloo_state).
constexpr auto notice_linger = std::chrono::milliseconds(100);

// How long a cancelled receive whose payload is arriving may take to finish before the connection
// is closed under it (the sender committed to it: a healthy one finishes in milliseconds).
constexpr auto cancel_grace = std::chrono::seconds(1);

// A wait's first sleep; each next one doubles, up to abort_poll. A wait sleeps on one transfer,
// but must also match messages on other channels now and then: the peer may wait for a large
// send that this rank matches only then (no event tells this rank that its header arrived).
constexpr auto first_nap = std::chrono::microseconds(100);
// The longest sleep of a cancel that waits for a transfer in flight.
constexpr auto nap_cap = std::chrono::milliseconds(1);

constexpr std::size_t head_capacity = size_word_bytes + eager_bytes;
// Header blocks kept for reuse; beyond this they are freed.
constexpr std::size_t max_free_heads = 256;
// Finished buffers over the caller's memory kept before they are destroyed (see retire()).
constexpr std::size_t keep_retired = 16;

// The fewest transfers in flight at which reap() looks at all of them.
constexpr std::size_t min_reap_scan = 64;

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

std::string one_decimal(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", seconds);
  return buf;
}

}  // namespace

std::string describe(bool send, int peer, tag_t tag, std::size_t bytes) {
  return std::string(send ? "send to" : "receive from") +
         (peer < 0 ? std::string(" any rank") : " rank " + std::to_string(peer)) + " (tag " +
         std::to_string(tag) + ", " + std::to_string(bytes) + " bytes)";
}

// ---- building blocks --------------------------------------------------------------------------

bool tracked_buffer::done(bool send) {
  std::lock_guard<std::mutex> lock(m_);
  if ((send ? sendCompletions_ : recvCompletions_) > 0) return true;
  if (ex_) std::rethrow_exception(ex_);
  return false;
}

bool tracked_buffer::arrived(bool send) {
  std::lock_guard<std::mutex> lock(m_);
  return (send ? sendCompletions_ : recvCompletions_) > 0;
}

bool tracked_buffer::failed() {
  std::lock_guard<std::mutex> lock(m_);
  return ex_ != nullptr;
}

bool tracked_buffer::wait_until(bool send, clock::time_point until) {
  std::unique_lock<std::mutex> lock(m_);
  auto& cv = send ? sendCv_ : recvCv_;
  cv.wait_until(lock, until,
                [&] { return ex_ != nullptr || (send ? sendCompletions_ : recvCompletions_) > 0; });
  if ((send ? sendCompletions_ : recvCompletions_) > 0) return true;
  if (ex_) std::rethrow_exception(ex_);
  return false;
}

void tracked_buffer::reset() {
  std::lock_guard<std::mutex> lock(m_);
  sendCompletions_ = 0;
  recvCompletions_ = 0;
}

std::uint64_t gloo_block::size_word() const {
  std::uint64_t v = 0;
  std::memcpy(&v, memory.get(), sizeof v);
  return v;
}

bool gloo_op::finished() {
  if (staging && !staging->buffer->done(send)) return false;
  if (payload && !payload->done(send)) return false;
  return !send || !head || head->buffer->done(true);
}

sigpipe_guard::sigpipe_guard() noexcept {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  // A thread that did not block SIGPIPE cannot have one pending; one that did may have one from
  // before, which is not ours to discard.
  if (sigismember(&old_, SIGPIPE) == 1) {
    sigset_t pending;
    keep_pending_ = sigpending(&pending) != 0 || sigismember(&pending, SIGPIPE) == 1;
  }
}

sigpipe_guard::~sigpipe_guard() {
  sigset_t pending;
  if (!keep_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    const timespec zero{};
    sigtimedwait(&pipe_, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

// ---- notices and failures ---------------------------------------------------------------------

void gloo_state::post_notices() {
  notices_in.resize(static_cast<std::size_t>(size));
  notices_out.resize(static_cast<std::size_t>(size));
  notice_sent = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
  pair_closed = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
  closed.resize(static_cast<std::size_t>(size));
  probes_in.resize(static_cast<std::size_t>(size));
  probes_out.resize(static_cast<std::size_t>(size));
  answers_in.resize(static_cast<std::size_t>(size));
  answers_out.resize(static_cast<std::size_t>(size));
  probed = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
  answered = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size));
  byes_in.resize(static_cast<std::size_t>(size));
  byes_out.resize(static_cast<std::size_t>(size));
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
    gloo_probe& q = probes_in[static_cast<std::size_t>(p)];
    gloo_probe& bye = byes_in[static_cast<std::size_t>(p)];
    try {
      n.buffer = std::make_unique<tracked_buffer>(transport, n.text.data(), n.text.size());
      n.buffer->recv(p, notice_slot, 0, n.text.size());
      q.buffer = std::make_unique<tracked_buffer>(transport, &q.word, sizeof q.word);
      q.buffer->recv(p, probe_slot, 0, sizeof q.word);
      bye.buffer = std::make_unique<tracked_buffer>(transport, &bye.word, sizeof bye.word);
      bye.buffer->recv(p, bye_slot, 0, sizeof bye.word);
    } catch (const gloo::IoException&) {
      // The peer has closed its side already (a backend built and dropped unused): no notice,
      // probe or goodbye can come from it, and any operation with it fails on its own.
      n.buffer.reset();
      q.buffer.reset();
      bye.buffer.reset();
    }
  }
}

void gloo_state::throw_if_aborted() {
  if (aborted.load()) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    throw peer_lost_error("gloo: rank " + std::to_string(rank) + " aborted: " + abort_reason);
  }
}

int gloo_state::aborted_peer(int peer) {
  for (int p = 0; p < static_cast<int>(notices_in.size()); ++p) {
    if (peer >= 0 && p != peer) continue;
    const gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
    if (n.buffer && n.buffer->arrived(false)) return p;
  }
  return -1;
}

std::string gloo_state::notice_of(int p) const {
  // At most the array: a peer's notice need not end in a NUL.
  const auto& text = notices_in[static_cast<std::size_t>(p)].text;
  return "rank " + std::to_string(p) +
         " aborted: " + std::string(text.data(), ::strnlen(text.data(), text.size()));
}

void gloo_state::throw_if_peer_aborted(const gloo_op& op, int peer) {
  const int p = aborted_peer(peer);
  if (p < 0) return;
  std::string msg = "gloo: rank " + std::to_string(rank) + ": " + notice_of(p);
  if (p != op.peer) {
    msg += " (rank " + std::to_string(rank) + " itself was waiting " +
           one_decimal(seconds_since(op.posted)) + " s for a " +
           describe(op.send, op.peer, op.tag, op.bytes) + ")";
  }
  throw peer_lost_error(msg);
}

void gloo_state::throw_if_closed(const gloo_op& op) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (static_cast<std::size_t>(op.peer) < closed.size())
      why = closed[static_cast<std::size_t>(op.peer)];
  }
  if (why.empty()) return;
  throw peer_lost_error("gloo: " + describe(op.send, op.peer, op.tag, op.bytes) + " on rank " +
                        std::to_string(rank) + " failed: rank " + std::to_string(rank) +
                        " closed its connection to rank " + std::to_string(op.peer) + " (" + why +
                        ")");
}

void gloo_state::check_peer(const gloo_op& op) {
  throw_if_closed(op);
  throw_if_peer_aborted(op, op.peer);
  // gloo fails every transfer still queued on a broken connection, the notice receive among them;
  // not one whose bytes were arriving at that moment. A receive from any rank waits on them all.
  for (int p = 0; p < static_cast<int>(notices_in.size()); ++p) {
    const gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
    if ((op.peer < 0 || p == op.peer) && n.buffer) n.buffer->done(false);
  }
}

void gloo_state::rethrow_transport(const gloo_op& op) {
  const std::string what = describe(op.send, op.peer, op.tag, op.bytes);
  try {
    throw;
  } catch (const error&) {
    throw;
  } catch (const gloo::IoException& e) {
    // A peer that aborted sent its reason before closing; gloo reads it before the close.
    throw_if_peer_aborted(op, op.peer);
    throw_if_closed(op);
    // Another rank that gave up earlier knew more: a stopped peer that the launcher ends once a
    // survivor has failed closes its connections, but was not killed first (measured: rank 0
    // waiting on a stopped rank 1 reported it as "killed or crashed" 13 ms after rank 2's
    // notice that rank 1 did not start the collective had arrived).
    throw_if_peer_aborted(op);
    throw peer_lost_error("gloo: " + what + " failed on rank " + std::to_string(rank) + ": rank " +
                          std::to_string(op.peer) +
                          " closed the connection without an abort notice: it exited, was "
                          "killed or crashed, or the network failed (" +
                          e.what() + ")");
  } catch (const std::exception& e) {
    throw backend_error(gloo_backend::name, op.send ? "send" : "recv", 0, what + ": " + e.what());
  }
}

void gloo_state::record_failure(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (last_failure.empty()) last_failure = what;
    failed = true;
  }
  mark_job_failed();
}

void gloo_state::mark_job_failed() noexcept {
  if (kv) kv->mark_job_failed();
}

void gloo_state::send_notices(const std::string& reason, const std::vector<int>& peers) {
  std::vector<tracked_buffer*> sent;
  for (const int p : peers) {
    if (p == rank || notice_sent[static_cast<std::size_t>(p)].exchange(true)) continue;
    gloo_notice& n = notices_out[static_cast<std::size_t>(p)];
    const std::size_t len = std::min(reason.size(), n.text.size() - 1);
    std::memcpy(n.text.data(), reason.data(), len);
    try {
      n.buffer = std::make_unique<tracked_buffer>(transport, n.text.data(), len);
      n.buffer->send(p, notice_slot, 0, len);
      sent.push_back(n.buffer.get());
    } catch (...) {
      // That connection is gone already; gloo is done with the buffer.
    }
  }
  const auto until = clock::now() + notice_send_limit;
  for (tracked_buffer* b : sent) {
    try {
      b->wait_until(true, until);
    } catch (...) {
    }
  }
}

void gloo_state::close_peer(int peer, const std::string& why) noexcept {
  try {
    std::string notice;
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      std::string& c = closed[static_cast<std::size_t>(peer)];
      if (c.empty()) {
        c = why;
        notice = "it closed its connection to rank " + std::to_string(peer) + " (" + why + ")";
        if (!last_failure.empty()) notice += " after: " + last_failure;
      }
    }
    const sigpipe_guard no_sigpipe;
    if (!notice.empty()) send_notices(notice, {peer});
    // Pair::close() takes the pair's lock, which gloo's event loop holds while it reads: once it
    // returns, nothing more is read into (or written from) a buffer of a transfer with `peer`.
    context->getPair(peer)->close();
    pair_closed[static_cast<std::size_t>(peer)] = true;
  } catch (...) {
  }
}

bool gloo_state::released(gloo_op& op) {
  try {
    if (op.finished()) return true;
  } catch (...) {
    return true;  // gloo failed the connection, and closed it
  }
  return connections_closed.load() || pair_closed[static_cast<std::size_t>(op.peer)].load();
}

// ---- probes ------------------------------------------------------------------------------------

void gloo_state::answer_probes(const gloo_op& op) noexcept {
  for (int p = 0; p < static_cast<int>(probes_in.size()); ++p) {
    const gloo_probe& q = probes_in[static_cast<std::size_t>(p)];
    if (!q.buffer || !q.buffer->arrived(false)) continue;
    if (answered[static_cast<std::size_t>(p)].exchange(true)) continue;
    gloo_answer& a = answers_out[static_cast<std::size_t>(p)];
    a.info.peer = op.peer;
    a.info.tag = op.tag;
    a.info.bytes = op.bytes;
    a.info.send = op.send ? 1 : 0;
    a.info.waited = seconds_since(op.posted);
    try {
      const sigpipe_guard no_sigpipe;
      a.buffer = std::make_unique<tracked_buffer>(transport, &a.info, sizeof a.info);
      a.buffer->send(p, answer_slot, 0, sizeof a.info);  // its receive is posted: no wait
    } catch (...) {
      // That connection is gone: nobody to answer.
    }
  }
}

bool gloo_state::probe(const gloo_op& op, int peer, gloo_wait_info& answer) {
  gloo_answer& a = answers_in[static_cast<std::size_t>(peer)];
  if (!probed[static_cast<std::size_t>(peer)].exchange(true)) {
    gloo_probe& q = probes_out[static_cast<std::size_t>(peer)];
    try {
      const sigpipe_guard no_sigpipe;
      a.buffer = std::make_unique<tracked_buffer>(transport, &a.info, sizeof a.info);
      a.buffer->recv(peer, answer_slot, 0, sizeof a.info);  // before the probe it answers
      q.buffer = std::make_unique<tracked_buffer>(transport, &q.word, sizeof q.word);
      q.buffer->send(peer, probe_slot, 0, sizeof q.word);
    } catch (...) {
      return false;  // the connection is gone: the wait on that peer fails on its own
    }
  }
  // Probed once already (an earlier wait that timed out): its answer then, if it gave one.
  if (!a.buffer) return false;
  const auto until = clock::now() + probe_limit;
  for (;;) {
    try {
      if (a.buffer->wait_until(false, std::min(until, clock::now() + probe_nap))) {
        answer = a.info;
        return true;
      }
    } catch (...) {
      return false;  // the connection failed
    }
    throw_if_peer_aborted(op);
    answer_probes(op);
    if (clock::now() >= until) return false;
  }
}

std::string gloo_state::trace(const gloo_op& op) {
  std::vector<int> seen{rank};
  std::string chain;
  int at = op.peer;
  gloo_wait_info w;
  while (probe(op, at, w)) {
    chain += (seen.size() == 1
                  ? "rank " + std::to_string(at) + " is waiting (" + one_decimal(w.waited) +
                        " s so far) for a "
                  : ", rank " + std::to_string(at) + " (" + one_decimal(w.waited) + " s) for a ") +
             describe(w.send != 0, w.peer, w.tag, w.bytes);
    seen.push_back(at);
    at = w.peer;
    if (at < 0 || at >= size) return chain;
    if (std::find(seen.begin(), seen.end(), at) != seen.end()) {
      return chain +
             ": these ranks wait for each other in a cycle (do they call the same "
             "collectives in the same order?)";
    }
  }
  const std::string maybe = " may be stopped, slow or dead (raise DISTCOMM_TIMEOUT if slow)";
  if (chain.empty()) return "rank " + std::to_string(at) + maybe;
  return chain + "; rank " + std::to_string(at) + " does not answer: it" + maybe;
}

// ---- point-to-point ---------------------------------------------------------------------------

std::shared_ptr<gloo_block> gloo_state::get_block(std::size_t capacity) {
  if (capacity == 0 && !free_heads.empty()) {
    std::shared_ptr<gloo_block> b = std::move(free_heads.back());
    free_heads.pop_back();
    return b;
  }
  if (capacity == 0) capacity = head_capacity;
  auto b = std::make_shared<gloo_block>();
  b->memory.reset(new unsigned char[capacity]);
  b->capacity = capacity;
  b->buffer = std::make_unique<tracked_buffer>(transport, b->memory.get(), capacity);
  return b;
}

void gloo_state::recycle(std::shared_ptr<gloo_block> block) {
  // Header blocks only; not one gloo failed, or one a wait still sleeps on.
  if (!block || block->capacity != head_capacity || block.use_count() > 1) return;
  if (free_heads.size() >= max_free_heads || block->buffer->failed()) return;
  block->buffer->reset();
  free_heads.push_back(std::move(block));
}

void gloo_state::retire(std::unique_ptr<tracked_buffer> buffer) {
  if (!buffer) return;
  // gloo wakes a waiter before its event loop lets go of the buffer, and gloo's destructor
  // yields the CPU until it has: destroying it right away spins whenever that thread is
  // preempted (most of the CPU of a 64 KiB ping-pong on the 2-core VM). The oldest go later.
  retired.push_back(std::move(buffer));
  if (retired.size() >= 2 * keep_retired) {
    retired.erase(retired.begin(), retired.end() - static_cast<std::ptrdiff_t>(keep_retired));
  }
}

bool gloo_state::gone(gloo_op& op) {
  bool finished = false;
  try {
    finished = op.finished();
  } catch (...) {
    return true;  // gloo failed the connection, and closed it
  }
  if (!finished) return released(op);
  recycle(std::move(op.head));
  recycle(std::move(op.staging));
  return true;
}

void gloo_state::reap() {
  while (!in_flight.empty() && gone(*in_flight.front())) in_flight.pop_front();
  // Transfers to one peer and tag end in order, to different ones not: now and then look past
  // one that waits for its receiver (amortized O(1) per transfer).
  if (in_flight.size() < reap_scan_at) return;
  in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(),
                                 [&](const std::shared_ptr<gloo_op>& op) { return gone(*op); }),
                  in_flight.end());
  reap_scan_at = std::max(min_reap_scan, 2 * in_flight.size());
}

std::shared_ptr<gloo_op> gloo_state::post_send(const void* data, std::size_t bytes, int peer,
                                               tag_t tag, bool notice) {
  auto op = std::make_shared<gloo_op>();
  op->send = true;
  op->notice = notice;
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  std::lock_guard<std::mutex> lock(mutex);
  try {
    check_peer(*op);
    reap();
    op->head = get_block();
    const std::uint64_t word = bytes;
    std::memcpy(op->head->memory.get(), &word, sizeof word);
    const sigpipe_guard no_sigpipe;
    if (bytes <= eager_bytes) {
      if (bytes > 0) std::memcpy(op->head->payload(), data, bytes);
      op->head->buffer->send(peer, slot_of(tag, false), 0, size_word_bytes + bytes);
      in_flight.push_back(std::move(op));
      return nullptr;
    }
    op->head->buffer->send(peer, slot_of(tag, false), 0, size_word_bytes);
    op->payload = std::make_unique<tracked_buffer>(transport, const_cast<void*>(data), bytes);
    op->payload->send(peer, slot_of(tag, true), 0, bytes);
    op->at = gloo_op::stage::payload;
  } catch (...) {
    rethrow_transport(*op);
  }
  return op;
}

// A receive from any rank waits in the channel of every peer for its tag, each with a header
// receive posted for it; the first channel whose message it takes keeps it (claim()), and the
// others' header receives stay posted, as a retracted receive's (see the top of this file).
std::shared_ptr<gloo_op> gloo_state::post_recv(void* data, std::size_t bytes, int peer, tag_t tag,
                                               std::size_t* got, int* source) {
  auto op = std::make_shared<gloo_op>();
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  op->user = data;
  op->got = got;
  op->source = source;
  std::lock_guard<std::mutex> lock(mutex);
  try {
    throw_if_closed(*op);
    reap();
    for_each_source(peer, [&](int q) {
      gloo_channel& ch = channels[{q, tag}];
      ch.waiting.push_back(op);
      if (ch.slots.size() < ch.waiting.size()) post_slot(ch, q, tag);
    });
    // A message that arrived before this receive.
    for_each_source(peer, [&](int q) { progress(channels[{q, tag}], q); });
  } catch (...) {
    unwait(*op, peer, -1);
    rethrow_transport(*op);
  }
  return op;
}

void gloo_state::unwait(const gloo_op& op, int peer, int keep) {
  for_each_source(peer, [&](int q) {
    if (q == keep) return;
    const auto it = channels.find({q, op.tag});
    if (it == channels.end()) return;
    auto& waiting = it->second.waiting;
    waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                 [&](const std::shared_ptr<gloo_op>& w) { return w.get() == &op; }),
                  waiting.end());
  });
}

void gloo_state::post_slot(gloo_channel& ch, int peer, tag_t tag) {
  std::shared_ptr<gloo_block> block = get_block();
  const sigpipe_guard no_sigpipe;  // posting a receive writes a notification
  block->buffer->recv(peer, slot_of(tag, false), 0, size_word_bytes + eager_bytes);
  ch.slots.push_back(std::move(block));
}

void gloo_state::progress(gloo_channel& ch, int peer) {
  while (!ch.waiting.empty() && !ch.slots.empty() && ch.slots.front()->buffer->arrived(false)) {
    std::shared_ptr<gloo_block> slot = std::move(ch.slots.front());
    ch.slots.pop_front();
    const std::shared_ptr<gloo_op> op = std::move(ch.waiting.front());
    ch.waiting.pop_front();
    if (op->peer < 0) claim(*op, peer);
    match(*op, *slot);
    recycle(std::move(slot));
  }
}

void gloo_state::claim(gloo_op& op, int peer) {
  op.peer = peer;
  *op.source = peer;
  unwait(op, -1, peer);
}

void gloo_state::progress_all() {
  for (auto& [key, ch] : channels) progress(ch, key.first);
}

void gloo_state::match(gloo_op& op, gloo_block& slot) {
  const std::uint64_t remote = slot.size_word();
  op.at = gloo_op::stage::done;
  if (op.got ? remote > op.bytes : remote != op.bytes) {
    op.error = std::make_exception_ptr(
        mismatch_error("gloo: rank " + std::to_string(rank) + " posted a " +
                       describe(false, op.peer, op.tag, op.bytes) + (op.got ? " (at most)" : "") +
                       " but rank " + std::to_string(op.peer) + " sent " + std::to_string(remote) +
                       " bytes; every rank must pass the same sizes"));
    if (remote > eager_bytes) drain(op.peer, op.tag, remote);
    return;
  }
  if (op.got) *op.got = remote;  // read by the waiter only once the receive completed
  if (remote <= eager_bytes) {
    if (remote > 0) std::memcpy(op.user, slot.payload(), remote);
    return;
  }
  try {
    op.payload = std::make_unique<tracked_buffer>(transport, op.user, remote);
    const sigpipe_guard no_sigpipe;
    op.payload->recv(op.peer, slot_of(op.tag, true), 0, remote);
    op.at = gloo_op::stage::payload;
  } catch (...) {
    // The connection failed: gloo reads nothing more on it. poll() reports the failure.
    op.payload.reset();
    op.error = std::current_exception();
  }
}

void gloo_state::drain(int peer, tag_t tag, std::size_t bytes) {
  auto op = std::make_shared<gloo_op>();
  op->peer = peer;
  op->tag = tag;
  op->bytes = bytes;
  try {
    op->staging = get_block(bytes);
    const sigpipe_guard no_sigpipe;
    op->staging->buffer->recv(peer, slot_of(tag, true), 0, bytes);
    in_flight.push_back(std::move(op));
  } catch (...) {
    // The connection failed: nothing more arrives on it.
  }
}

bool gloo_state::poll(gloo_op& op) {
  throw_if_aborted();
  try {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      if (poll_locked(op)) return true;
      check_peer(op);
      return false;
    } catch (...) {
      rethrow_transport(op);
    }
  } catch (const timeout_error& e) {
    record_failure(e.what());
    throw;
  } catch (const peer_lost_error& e) {
    record_failure(e.what());
    throw;
  }
}

bool gloo_state::poll_locked(gloo_op& op) {
  progress_all();
  if (op.send) {
    if (!op.finished()) return false;
    recycle(std::move(op.head));
    retire(std::move(op.payload));
    op.at = gloo_op::stage::done;
    return true;
  }
  if (op.error) std::rethrow_exception(op.error);
  if (op.at == gloo_op::stage::matching) return false;
  if (op.at == gloo_op::stage::payload) {
    if (!op.payload->done(false)) return false;
    retire(std::move(op.payload));
    op.at = gloo_op::stage::done;
  }
  return true;
}

tracked_buffer* gloo_state::sleep_target(gloo_op& op, std::shared_ptr<gloo_block>& keep) {
  if (op.send) {
    if (op.head && !op.head->buffer->arrived(true)) {
      keep = op.head;
      return keep->buffer.get();
    }
    return op.payload.get();
  }
  if (op.at == gloo_op::stage::payload) return op.payload.get();
  if (op.at != gloo_op::stage::matching) return nullptr;
  // Messages fill the channel's slots in order, and progress() has matched every arrived one to
  // a receive waiting before this one: this receive's message lands in the slot at its place.
  const auto it = channels.find({op.peer, op.tag});
  if (it == channels.end()) return nullptr;
  const auto& waiting = it->second.waiting;
  const auto at = static_cast<std::size_t>(
      std::find_if(waiting.begin(), waiting.end(),
                   [&](const std::shared_ptr<gloo_op>& w) { return w.get() == &op; }) -
      waiting.begin());
  if (at >= it->second.slots.size()) return nullptr;
  keep = it->second.slots[at];
  return keep->buffer.get();
}

void gloo_state::wait(gloo_op& op, deadline until) {
  clock::duration nap = first_nap;
  for (bool waited = false;; waited = true) {
    if (poll(op)) return;
    try {
      // Only once this wait has slept: the notices and the probes are one lock per peer.
      if (waited) {
        throw_if_peer_aborted(op);
        answer_probes(op);
      }
      const auto now = clock::now();
      if (now >= until) {
        throw_if_peer_aborted(op);
        int from = 0;
        {
          std::lock_guard<std::mutex> lock(mutex);
          from = op.peer;
        }
        // A receive from any rank no message matched has nobody to ask (in a world of two, the
        // other is the one that did not send).
        std::string why = "no rank sent a message on its tag";
        if (from >= 0) {
          why = trace(op);
        } else if (size == 2) {
          why = "rank " + std::to_string(1 - rank) + ", the only other, sent no message on its tag";
        }
        if (poll(op)) return;  // it completed while the peers answered
        throw timeout_error("gloo: " + describe(op.send, op.peer, op.tag, op.bytes) + " on rank " +
                            std::to_string(rank) + " did not complete before its deadline; " + why);
      }
      const auto slice = std::min<clock::time_point>(until, now + nap);
      nap = std::min<clock::duration>(2 * nap, abort_poll);
      std::shared_ptr<gloo_block> keep;
      tracked_buffer* target = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex);
        target = sleep_target(op, keep);
      }
      if (target == nullptr) {
        std::this_thread::sleep_until(slice);
        continue;
      }
      try {
        target->wait_until(op.send, slice);
      } catch (...) {
        rethrow_transport(op);
      }
    } catch (const timeout_error& e) {
      record_failure(e.what());
      throw;
    } catch (const peer_lost_error& e) {
      record_failure(e.what());
      throw;
    }
  }
}

void gloo_state::say_goodbye() noexcept {
  if (size <= 1 || !transport || byes_in.size() != static_cast<std::size_t>(size)) return;
  const sigpipe_guard no_sigpipe;
  for (int p = 0; p < size; ++p) {
    if (p == rank || pair_closed[static_cast<std::size_t>(p)].load()) continue;
    gloo_probe& bye = byes_out[static_cast<std::size_t>(p)];
    try {
      bye.buffer = std::make_unique<tracked_buffer>(transport, &bye.word, sizeof bye.word);
      bye.buffer->send(p, bye_slot, 0, sizeof bye.word);  // its receive is posted: no wait
    } catch (...) {
      bye.buffer.reset();  // that connection is gone: nobody to tell
    }
  }
  // A peer is done when its goodbye or its abort notice arrived, or its connection ended (it
  // exited without saying so: the receive fails).
  const auto done = [this](int p) {
    if (p == rank || pair_closed[static_cast<std::size_t>(p)].load()) return true;
    const gloo_probe& bye = byes_in[static_cast<std::size_t>(p)];
    const gloo_notice& n = notices_in[static_cast<std::size_t>(p)];
    return !bye.buffer || bye.buffer->arrived(false) || bye.buffer->failed() ||
           (n.buffer && n.buffer->arrived(false));
  };
  const deadline until = std::min(deadline_after(timeout), deadline_after(close_linger));
  for (int p = 0; p < size; ++p) {
    while (!done(p) && clock::now() < until && !aborted.load() && !connections_closed.load()) {
      try {
        byes_in[static_cast<std::size_t>(p)].buffer->wait_until(
            false, std::min(until, clock::now() + abort_poll));
      } catch (...) {
        break;  // its connection failed: it is gone
      }
    }
  }
}

gloo_state::~gloo_state() {
  // Nobody closes while a peer may still read (say_goodbye), unless something failed: then
  // nobody waits for peers that may never come.
  if (!aborted.load() && !failed.load() && !connections_closed.load() &&
      std::uncaught_exceptions() == 0) {
    say_goodbye();
  }
  // Lets gloo write the small sends still in flight (each is complete for its caller at once),
  // unless their connections are closed or the deadline passed. Detached sends (the notice of a
  // communicator that leaves) are taken at once by a peer that still waits for this one, and by
  // nobody once every rank is done: they get notice_linger.
  const deadline until = deadline_after(timeout);
  const deadline notices_until = std::min(until, deadline_after(notice_linger));
  while (!connections_closed.load() && clock::now() < until) {
    std::shared_ptr<gloo_op> op;
    {
      std::lock_guard<std::mutex> lock(mutex);
      reap();
      if (in_flight.empty()) return;
      op = in_flight.front();
    }
    const deadline limit = op->notice ? notices_until : until;
    if (clock::now() >= limit) return;  // the connections close with the context, then the buffers
    try {
      check_peer(*op);  // a peer that aborted or failed takes nothing more
      gloo_block* b =
          op->head && !op->head->buffer->arrived(true) ? op->head.get() : op->staging.get();
      if (b != nullptr) b->buffer->wait_until(op->send, std::min(limit, clock::now() + abort_poll));
    } catch (...) {
      return;  // the connections close with the context, the buffers after them
    }
  }
}

void gloo_state::cancel(const std::shared_ptr<gloo_op>& op) noexcept {
  try {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!op->send && op->at == gloo_op::stage::matching) {
        // Not matched: retract it (from every channel, one from any rank). Its slot takes the
        // next message for the next receive.
        unwait(*op, op->peer, -1);
        return;
      }
      if (op->at != gloo_op::stage::payload) return;
    }
    // In flight in the caller's memory, and gloo cannot retract it: a large send its receiver has
    // not taken yet, or a matched receive whose payload is arriving. A healthy peer finishes it
    // soon (a receiver matches a send once it waits for it); after a failure it may never.
    const deadline until = clock::now() + cancel_grace;
    while (!released(*op) && !failed.load() && !aborted.load() && clock::now() < until) {
      std::shared_ptr<gloo_block> keep;
      tracked_buffer* target = nullptr;
      try {
        if (poll(*op)) break;  // a send's peer may wait for this rank to match its messages
        std::lock_guard<std::mutex> lock(mutex);
        target = sleep_target(*op, keep);
      } catch (...) {
        break;
      }
      try {
        if (target != nullptr)
          target->wait_until(op->send, std::min(until, clock::now() + nap_cap));
      } catch (...) {
      }
    }
    if (!released(*op)) {
      close_peer(op->peer, "a " + describe(op->send, op->peer, op->tag, op->bytes) +
                               " was cancelled " +
                               (op->send ? "before rank " + std::to_string(op->peer) + " took it"
                                         : "while its payload was arriving"));
    }
    if (!released(*op)) {
      // Returning would let gloo use a buffer the caller is about to free.
      std::fprintf(stderr,
                   "gloo: %s on rank %d: still in flight after its connection was closed; "
                   "cannot release the buffer safely, aborting\n",
                   describe(op->send, op->peer, op->tag, op->bytes).c_str(), rank);
      std::abort();
    }
    std::lock_guard<std::mutex> lock(mutex);
    recycle(std::move(op->head));
    retire(std::move(op->payload));
    op->at = gloo_op::stage::done;
  } catch (...) {
  }
}

}  // namespace distcomm::detail
