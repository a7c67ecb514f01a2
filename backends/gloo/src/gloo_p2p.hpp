// The gloo backend's point-to-point layer: its own matching of messages to receives per (peer,
// tag) on top of gloo's unbound buffers, abort notices and the lost-peer bookkeeping. Internal to
// the gloo backend (gloo.cpp and gloo_p2p.cpp); gloo_p2p.cpp explains the protocol.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/unbound_buffer.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/backends/gloo.hpp"
#include "distcomm/rendezvous/store.hpp"

namespace distcomm::detail {

namespace tcp = gloo::transport::tcp;

// Payloads up to this size travel in one gloo transfer with their size word, copied through a
// block the backend owns on both sides; larger ones go in a transfer of their own, straight from
// and into the caller's memory. Ping-pong on the 2-core VM: 0.17-0.20 ms per round trip up to
// 16 KiB, 0.38-0.42 ms from 16 KiB + 8 to 64 KiB (raw gloo: 0.2-0.27 ms). 64 KiB halved a 64 KiB
// ring allreduce, but every posted receive holds a block of this size (a 1 GiB ring allreduce
// posts ~2048 receives: 32 MiB of blocks at 16 KiB, 128 MiB at 64 KiB).
constexpr std::size_t eager_bytes = std::size_t{16} << 10;
constexpr std::size_t size_word_bytes = sizeof(std::uint64_t);

// gloo keeps the transport context protected; our buffers need it to be constructed directly.
class exposed_context : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;
  std::shared_ptr<tcp::Context> transport() const {
    return std::dynamic_pointer_cast<tcp::Context>(transportContext_);
  }
};

// A tcp unbound buffer whose completion can be polled and waited with our own deadline (gloo's
// own timed wait closes every pair of the context when it times out, which would turn one slow
// peer into a dead job), and which can be reused for another transfer.
class tracked_buffer : public tcp::UnboundBuffer {
 public:
  using tcp::UnboundBuffer::UnboundBuffer;
  ~tracked_buffer() override = default;
  // Completed; throws gloo's exception if the connection failed first.
  bool done(bool send);
  // Completed, whatever happened to the connection since (an abort notice is read before the
  // connection's end is).
  bool arrived(bool send);
  // gloo failed the connection while this transfer was pending on it.
  bool failed();
  // Waits until completed, failed (throws) or `until`; true when completed.
  bool wait_until(bool send, clock::time_point until);
  // Ready for another transfer; only once gloo is done with the last one.
  void reset();
};

// Memory the backend owns with the unbound buffer over it: a posted header receive or a small
// send (the size word, then the payload), reused from transfer to transfer; or a mismatched
// payload being drained.
struct gloo_block {
  std::unique_ptr<unsigned char[]> memory;
  std::size_t capacity = 0;
  std::unique_ptr<tracked_buffer> buffer;

  std::uint64_t size_word() const;
  unsigned char* payload() { return memory.get() + size_word_bytes; }
};

// One isend or irecv, owned by its request; a small send (complete for its caller at once) and a
// mismatched payload being drained are owned by the backend's `in_flight` until gloo is done.
struct gloo_op {
  enum class stage { matching, payload, done };  // of a receive

  bool send = false;
  int peer = 0;  // -1: a receive from any rank no message matched yet (irecv_any)
  tag_t tag = 0;
  std::size_t bytes = 0;
  void* user = nullptr;        // receive destination
  std::size_t* got = nullptr;  // irecv_up_to: `bytes` is a capacity, the size goes here
  int* source = nullptr;       // irecv_any: the sender's rank goes here
  stage at = stage::matching;
  std::exception_ptr error;                 // found while matching (mismatch, failed post)
  std::shared_ptr<gloo_block> head;         // send: size word (and the payload when small)
  std::shared_ptr<gloo_block> staging;      // a drained payload
  std::unique_ptr<tracked_buffer> payload;  // a large payload, in the caller's memory
  clock::time_point posted = clock::now();
  bool notice = false;  // a detached send: teardown waits for it only briefly

  // True when gloo no longer touches this op's memory; throws if its connection failed.
  bool finished();
};

// Messages of one (peer, tag), matched to receives in order.
struct gloo_channel {
  // Header receives posted on gloo, in the order messages will fill them; at least one per
  // waiting receive.
  std::deque<std::shared_ptr<gloo_block>> slots;
  // Receives not matched to a message yet, in posting order.
  std::deque<std::shared_ptr<gloo_op>> waiting;
};

// One abort notice, received from a peer or sent to one.
struct gloo_notice {
  std::array<char, 512> text{};  // at most this many bytes of the reason, NUL-terminated
  std::unique_ptr<tracked_buffer> buffer;
};

// What a rank waits for, as it answers a peer's probe: a peer whose wait on it timed out asks,
// so that its message can name the rank at the end of the chain of waits (gloo_state::trace).
// Both sides run the same build: the layout is shared as is.
struct gloo_wait_info {
  std::int32_t peer = -1;
  std::uint32_t tag = 0;
  std::uint64_t bytes = 0;
  std::uint32_t send = 0;
  std::uint32_t unused = 0;
  double waited = 0;  // seconds
};

// One probe, received from a peer or sent to one (it carries nothing), or one answer.
struct gloo_probe {
  std::uint64_t word = 0;
  std::unique_ptr<tracked_buffer> buffer;
};
struct gloo_answer {
  gloo_wait_info info;
  std::unique_ptr<tracked_buffer> buffer;
};

// Blocks SIGPIPE in this thread for its lifetime; one that a write to a lost peer raised meanwhile
// is discarded (unless one was pending already), so the write fails with EPIPE instead of killing
// the process. The process's own SIGPIPE disposition is left alone.
class sigpipe_guard {
 public:
  sigpipe_guard() noexcept;
  ~sigpipe_guard();
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool keep_pending_ = false;
};

std::string describe(bool send, int peer, tag_t tag, std::size_t bytes);

struct gloo_state {
  gloo_state() = default;
  gloo_state(const gloo_state&) = delete;
  gloo_state& operator=(const gloo_state&) = delete;
  // Waits (up to `timeout`) until gloo has written the sends in flight.
  ~gloo_state();

  int rank = 0;
  int size = 1;
  // What split() needs to connect a sub-group: this backend's keys and its options.
  std::string prefix;
  gloo_options opts;
  std::chrono::duration<double> timeout{300.0};
  std::mutex mutex;  // the matching state below; taken before failure_mutex, never after
  std::map<std::pair<int, tag_t>, gloo_channel> channels;
  std::vector<std::shared_ptr<gloo_block>> free_heads;  // header blocks for reuse
  std::deque<std::shared_ptr<gloo_op>> in_flight;
  std::vector<std::unique_ptr<tracked_buffer>> retired;  // finished; destroyed later
  std::size_t reap_scan_at = 0;
  std::atomic<bool> aborted{false};
  // A wait of this backend failed (timeout, lost peer): a cancelled receive whose payload is
  // still arriving is then not waited for before its connection is closed.
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;  // abort_reason, last_failure, closed
  std::string abort_reason;
  std::string last_failure;  // the first wait that failed, told to a peer whose connection closes
  std::vector<std::string> closed;  // by peer: why this rank closed the connection to it
  std::uint32_t native_tag = 0;
  std::vector<gloo_notice> notices_in;   // by peer; posted receives (this rank's entry unused)
  std::vector<gloo_notice> notices_out;  // by peer; gloo may still be writing them
  std::unique_ptr<std::atomic<bool>[]> notice_sent;  // by peer: notices_out[p] is taken
  // Probes: one per ordered pair of ranks in the backend's life, so no receive is posted after
  // the start but the answer to this rank's own probe (see the top of gloo_p2p.cpp).
  std::vector<gloo_probe> probes_in;                 // by peer; posted receives
  std::vector<gloo_probe> probes_out;                // by peer; sent
  std::vector<gloo_answer> answers_in;               // by peer; posted when probing it
  std::vector<gloo_answer> answers_out;              // by peer; gloo may still be writing them
  std::unique_ptr<std::atomic<bool>[]> probed;       // by peer: probes_out[p] is taken
  std::unique_ptr<std::atomic<bool>[]> answered;     // by peer: answers_out[p] is taken
  std::unique_ptr<std::atomic<bool>[]> pair_closed;  // by peer: close_peer() closed it
  // The closing handshake: one word per ordered pair of ranks, sent as this rank's teardown
  // starts (say_goodbye()); its receive is posted at the start.
  std::vector<gloo_probe> byes_in;   // by peer; posted receives
  std::vector<gloo_probe> byes_out;  // by peer; sent
  std::atomic<bool> connections_closed{false};       // abort() closed every connection
  std::shared_ptr<exposed_context> context;
  std::shared_ptr<tcp::Context> transport;
  // The store this backend was made over, owned: split() and group_store() make the children's
  // over it, whatever the caller keeps. Told when this backend fails (abort, a failed wait) so
  // that the rank hosting the job's store does not keep serving a failed job at exit.
  std::shared_ptr<store> kv;
  void mark_job_failed() noexcept;

  // Teardown's first step: tells every peer this rank is done, then waits (up to close_linger,
  // within `timeout`) until each peer said so too or its connection ended. Closing a socket
  // that holds unread bytes (gloo's notifications of a peer still in its last collective)
  // resets the connection, and the reset discards what the peer had not read yet of this rank's
  // last messages: so nobody closes while a peer may still read.
  void say_goodbye() noexcept;

  // ---- notices and failures ----
  // Posts the notice receives; sizes the per-peer tables. Once, after connecting.
  void post_notices();
  void throw_if_aborted();
  // The first peer (only `peer` unless -1) whose abort notice arrived, or -1.
  int aborted_peer(int peer = -1);
  std::string notice_of(int p) const;
  // A peer that gave up first explains why `op` cannot complete: its reason names the rank it
  // was waiting for. When that peer is not op's, say what this rank was waiting for too.
  void throw_if_peer_aborted(const gloo_op& op, int peer = -1);
  void throw_if_closed(const gloo_op& op);
  // Throws when op's peer aborted, or its connection was closed or failed.
  void check_peer(const gloo_op& op);
  // Inside a catch block: the transport's exception as DistComm's.
  [[noreturn]] void rethrow_transport(const gloo_op& op);
  void record_failure(const std::string& what);
  // Sends `reason` to each of `peers` not sent a notice yet, for at most 0.1 s. Caller holds no
  // lock.
  void send_notices(const std::string& reason, const std::vector<int>& peers);
  // Closes the connection to `peer` after telling it why; gloo then never touches a buffer of a
  // transfer with it again. Caller holds no lock.
  void close_peer(int peer, const std::string& why) noexcept;
  // True when gloo no longer touches op's memory: its transfers ended, or their connection is
  // closed.
  bool released(gloo_op& op);

  // ---- probes ----
  // Tells each peer whose probe arrived that this rank waits for `op`.
  void answer_probes(const gloo_op& op) noexcept;
  // Asks `peer` what it waits for; false when it does not answer within probe_limit. Meanwhile
  // answers other peers' probes and throws peer_lost_error when a peer's abort notice arrives.
  bool probe(const gloo_op& op, int peer, gloo_wait_info& answer);
  // Why op, which passed its deadline, did not complete: the rank it waits for is stopped, slow
  // or dead, or waits itself for another (and so on): names the rank at the end of the chain.
  std::string trace(const gloo_op& op);

  // ---- point-to-point ----
  // Null for a small send: complete at once.
  std::shared_ptr<gloo_op> post_send(const void* data, std::size_t bytes, int peer, tag_t tag,
                                     bool notice = false);
  // peer -1: from any rank, whose rank goes to *source (every channel of the tag waits for it).
  std::shared_ptr<gloo_op> post_recv(void* data, std::size_t bytes, int peer, tag_t tag,
                                     std::size_t* got = nullptr, int* source = nullptr);
  // Completes op if it can without waiting; true when it is complete.
  bool poll(gloo_op& op);
  void wait(gloo_op& op, deadline until);
  // The request let go of op: see the top of gloo_p2p.cpp.
  void cancel(const std::shared_ptr<gloo_op>& op) noexcept;

 private:
  // Callers of these hold `mutex`.
  // A header block (size word and eager_bytes), or a fresh one of `capacity` bytes.
  std::shared_ptr<gloo_block> get_block(std::size_t capacity = 0);
  void recycle(std::shared_ptr<gloo_block> block);
  // Destroys a finished buffer once gloo's event loop surely let go of it.
  void retire(std::unique_ptr<tracked_buffer> buffer);
  // True when gloo is done with op (its block goes back to the pool).
  bool gone(gloo_op& op);
  // Drops the transfers in `in_flight` that gloo is done with.
  void reap();
  void post_slot(gloo_channel& ch, int peer, tag_t tag);
  // Matches the channel's arrived messages (from `peer`) to its waiting receives, in order.
  void progress(gloo_channel& ch, int peer);
  // A receive from any rank takes a message from `peer`: it leaves the tag's other channels.
  void claim(gloo_op& op, int peer);
  // The ranks a receive from `peer` waits on: `peer`, or every other rank (-1: from any rank).
  template <class F>
  void for_each_source(int peer, F&& f) const {
    if (peer >= 0) {
      f(peer);
      return;
    }
    for (int q = 0; q < size; ++q) {
      if (q != rank) f(q);
    }
  }
  // Takes op out of the waiting receives of every rank it waits on (`peer`) but `keep`.
  void unwait(const gloo_op& op, int peer, int keep);
  void progress_all();
  void match(gloo_op& op, gloo_block& slot);
  void drain(int peer, tag_t tag, std::size_t bytes);
  bool poll_locked(gloo_op& op);
  // The buffer whose completion op waits for next (kept alive by `keep`), or null.
  tracked_buffer* sleep_target(gloo_op& op, std::shared_ptr<gloo_block>& keep);
};

}  // namespace distcomm::detail
