// check::gated<B>: the agreement on a call's fingerprint (check/agree.hpp) overlapped with the
// call's first messages, on backends whose agreement is an exchange of point-to-point messages
// (mpi, gloo, ucx, local, plugins). The agreement's first message leaves when the call starts
// (call_check::begin()), and the strategy runs over the gate instead of the backend:
//
//  * its sends go out at once, behind the agreement's first message;
//  * its receives are held, and posted in order once the agreement ended;
//  * the agreement runs at the first thing that needs it: a wait, a write into a buffer (every
//    copy or reduction, through the memory operations policy), a native collective, or a send
//    past max_early_sends.
//
// So nothing lands in the caller's buffers before every rank's fingerprint agreed, while the data
// travels during the agreement instead of after it. Where the fingerprints differ, every rank
// learns it from the same exchange, as before; the sends that went early are then drained: each
// rank tells every other which it sent them (tag and size, drain_early()), receives and drops
// theirs, and only then raises the mismatch_error, so the communicator stays usable and the next
// call's messages pair up as usual. Every rank of a communicator drains after a mismatch, whether
// its own call went through the gate or agreed first (a carried call, a barrier).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/fingerprint.hpp"
#include "distcomm/check/hooks.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::check {

// The drain's own tag, beside the agreement's (check/exchange.hpp, tag_agree).
inline constexpr tag_t tag_drain = 30;

// A send made before the call's agreement ended.
struct early_send {
  int to = 0;
  tag_t tag = 0;
  std::size_t bytes = 0;
};
// Sends a call makes before the agreement runs: enough for every strategy's first step at two
// ranks and the first segments of a ring's; the drain's message to each peer holds this many.
inline constexpr std::size_t max_early_sends = 16;

// After a mismatch every rank of the exchange found, on every rank: tells each peer which of
// `sent` went to it, then receives and drops what each peer says it sent here. Returns when
// every early message to this rank is taken (this rank's own early sends complete as the peers
// drain them). Throws timeout_error past `until`.
template <class B>
void drain_early(B& b, const std::vector<early_send>& sent, deadline until) {
  using request = typename detail::request_of<B>::type;
  const int p = b.size();
  const int r = b.rank();
  constexpr std::size_t words = 1 + 2 * max_early_sends;  // count, then (tag, bytes) pairs
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::uint64_t> told(words * pp, 0), heard(words * pp, 0);
  for (const early_send& e : sent) {
    std::uint64_t* w = &told[words * static_cast<std::size_t>(e.to)];
    const std::uint64_t n = w[0]++;
    w[1 + 2 * n] = e.tag;
    w[2 + 2 * n] = e.bytes;
  }
  std::vector<request> reqs;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const auto at = words * static_cast<std::size_t>(q);
    reqs.push_back(b.irecv(&heard[at], words * sizeof(std::uint64_t), q, tag_drain));
    reqs.push_back(b.isend(&told[at], words * sizeof(std::uint64_t), q, tag_drain));
  }
  for (auto& q : reqs) q.wait(until);
  for (int q = 0; q < p; ++q) {
    const std::uint64_t* w = &heard[words * static_cast<std::size_t>(q)];
    if (q == r || w[0] > max_early_sends) continue;  // (a corrupt count: nothing to trust)
    for (std::uint64_t k = 0; k < w[0]; ++k) {
      // The size is the peer's word: taken into memory only where this process has it (and at
      // most an address space's worth), else the communicator fails, naming it.
      const std::uint64_t bytes = w[2 + 2 * k];
      std::unique_ptr<unsigned char[]> dropped;
      if (bytes <= (std::uint64_t{1} << 48)) {
        dropped.reset(new (std::nothrow) unsigned char[std::max<std::size_t>(
            static_cast<std::size_t>(bytes), 1)]);
      }
      if (!dropped) {
        throw peer_lost_error(
            "after a mismatch, rank " + std::to_string(q) + " says it sent rank " +
            std::to_string(r) + " " + std::to_string(bytes) + " bytes early (tag " +
            std::to_string(w[1 + 2 * k]) +
            "), more than this process can take to drop: its message was corrupted; the "
            "communicator cannot go on");
      }
      b.irecv(dropped.get(), static_cast<std::size_t>(bytes), q,
              static_cast<tag_t>(w[1 + 2 * k]))
          .wait(until);
    }
  }
}

// Whether calls on backend B agree through the gate: host memory, the agreement an exchange of
// B's own messages (not shm's native or deferred one).
template <class B>
inline constexpr bool gates =
    !distcomm::detail::moves_device_memory<B>::value && !detail::has_native_agree<B>::value &&
    !detail::defers_agreement<B>::value &&
    !std::is_same_v<typename detail::request_of<B>::type, typename detail::request_of<void>::type>;

// What runs the agreement when the gate needs it: call_check<B>::agree() with this call's
// fingerprint (communicator/pipeline.hpp).
struct gate_opener {
  void (*run)(void* self, const std::vector<early_send>& sent) = nullptr;
  void* self = nullptr;
};

template <class B>
class gated {
  using inner = typename B::request;

 public:
  static constexpr const char* name = B::name;
  static constexpr bool native_is_deterministic =
      distcomm::detail::native_is_deterministic<B>::value;
  static constexpr bool native_alltoallv_checks_counts =
      distcomm::detail::native_alltoallv_checks_counts<B>::value;

  // A strategy's request: B's own, or one of the messages the call made while its agreement was
  // pending, which the gate keeps: a send that went early (after a mismatch the gate waits for
  // the peer to drain it before the error unwinds the strategy), or a receive held until the
  // agreement ended. Waiting for either ends the agreement first (a send may need the peer's
  // receive, which the peer posts after the agreement only).
  class [[nodiscard]] request {
   public:
    request() = default;
    void wait(deadline until) {
      if (g_) {
        g_->open();
        g_->pending_[index_].req.wait(until);
      } else {
        own_.wait(until);
      }
    }
    bool test() {
      if (!g_) return own_.test();
      g_->open();
      return g_->pending_[index_].req.test();
    }

   private:
    friend class gated;
    explicit request(inner r) : own_(std::move(r)) {}
    request(gated* g, std::size_t index) : g_(g), index_(index) {}
    inner own_;
    gated* g_ = nullptr;  // the gate, for a message made while the agreement was pending
    std::size_t index_ = 0;
  };

  explicit gated(B& b) : b_(&b) {}
  gated(const gated&) = delete;
  gated& operator=(const gated&) = delete;

  B& backend() noexcept { return *b_; }
  int rank() const { return b_->rank(); }
  int size() const { return b_->size(); }

  // The next call's agreement waits for `opener` (call_check::agree through it).
  void arm(gate_opener opener) {
    opener_ = opener;
    armed_ = true;
    sent_.clear();
    pending_.clear();
  }
  bool armed() const noexcept { return armed_; }
  // Drops an agreement that never ran (the call failed on this rank before it was needed).
  void disarm() noexcept { armed_ = false; }

  // Runs the agreement if it is still pending, then posts the receives held for it. Its failure
  // propagates (after a mismatch, the opener settles the early sends first).
  void open() {
    if (!armed_) return;
    armed_ = false;
    opener_.run(opener_.self, sent_);
    for (message& m : pending_) {
      if (!m.send) m.req = b_->irecv(m.data, m.bytes, m.peer, m.tag);
    }
  }

  // After a mismatch every rank drained (drain_early()): this rank's early sends complete as
  // their receivers take them, before the error unwinds the strategy that holds their requests
  // (a backend may cancel a send whose request goes). Waited for a moment at most.
  void settle_early_sends() noexcept {
    const deadline grace = deadline_after(std::chrono::seconds(1));
    for (message& m : pending_) {
      if (!m.send) continue;
      try {
        m.req.wait(grace);
      } catch (const std::exception&) {
      }
    }
  }

  request isend(const void* data, std::size_t bytes, int peer, tag_t tag) {
    if (armed_ && sent_.size() == max_early_sends) open();
    if (!armed_) return request(b_->isend(data, bytes, peer, tag));
    inner posted = b_->isend(data, bytes, peer, tag);
    sent_.push_back({peer, tag, bytes});
    pending_.push_back({const_cast<void*>(data), bytes, peer, tag, true, std::move(posted)});
    return request(this, pending_.size() - 1);
  }
  request irecv(void* data, std::size_t bytes, int peer, tag_t tag) {
    if (!armed_) return request(b_->irecv(data, bytes, peer, tag));
    pending_.push_back({data, bytes, peer, tag, false, inner{}});
    return request(this, pending_.size() - 1);
  }

  // The backend's own collectives, after the agreement.
#define DISTCOMM_GATED_NATIVE(fn)                                                \
  template <class Same = B, class... A>                                          \
  auto fn(A&&... a)->decltype(std::declval<Same&>().fn(std::forward<A>(a)...)) { \
    open();                                                                      \
    return b_->fn(std::forward<A>(a)...);                                        \
  }
  DISTCOMM_GATED_NATIVE(native_allreduce)
  DISTCOMM_GATED_NATIVE(native_reduce_scatter)
  DISTCOMM_GATED_NATIVE(native_allgather)
  DISTCOMM_GATED_NATIVE(native_broadcast)
  DISTCOMM_GATED_NATIVE(native_alltoall)
  DISTCOMM_GATED_NATIVE(native_alltoallv)
  DISTCOMM_GATED_NATIVE(native_barrier)
#undef DISTCOMM_GATED_NATIVE

  // The strategies' host memory operations, each after the agreement: nothing is written before
  // it ended (strategy/detail.hpp, memory_of).
  class memory {
   public:
    memory(gated& g, strategy::detail::scratch& s) noexcept : g_(&g), host_(s) {}
    void copy(void* dst, const void* src, std::size_t bytes) {
      g_->open();
      host_.copy(dst, src, bytes);
    }
    void combine(void* dst, const void* a, const void* b, std::size_t count, dtype t,
                 reduce_op op) {
      g_->open();
      host_.combine(dst, a, b, count, t, op);
    }
    void divide(void* dst, const void* src, std::size_t count, dtype t, std::size_t divisor) {
      g_->open();
      host_.divide(dst, src, count, t, divisor);
    }
    void fold(void* dst, const void* const* in, std::size_t n, std::size_t count, dtype t,
              reduce_op op) {
      g_->open();
      host_.fold(dst, in, n, count, t, op);
    }
    unsigned char* scratch(std::size_t bytes) { return host_.scratch(bytes); }
    static void complete(deadline) noexcept {}

   private:
    gated* g_;
    strategy::detail::host_memory host_;
  };
  memory host_memory(strategy::detail::scratch& s) noexcept { return memory(*this, s); }

 private:
  // A message of the call made while its agreement was pending.
  struct message {
    void* data;
    std::size_t bytes;
    int peer;
    tag_t tag;
    bool send;
    inner req;  // a held receive's once posted
  };

  B* b_;
  bool armed_ = false;
  gate_opener opener_;
  std::vector<message> pending_;  // this call's, made while its agreement was pending
  std::vector<early_send> sent_;  // the sends among pending_, for the agreement
};

// The placeholder where calls do not go through a gate.
struct no_gate {
  template <class B>
  explicit no_gate(B&) noexcept {}
  static bool armed() noexcept { return false; }
  static void disarm() noexcept {}
};

}  // namespace distcomm::check

namespace distcomm::detail {
// The gate is the backend as far as the strategies' tables go.
template <class B>
struct backend_default_algo<check::gated<B>> : backend_default_algo<B> {};
}  // namespace distcomm::detail
