// call_check<B>: before a collective moves data, the ranks agree on its fingerprint
// (check/fingerprint.hpp). A dissemination exchange (check/exchange.hpp) leaves every rank with the
// same extremes of all fingerprints, so either every rank goes on or every rank raises the same
// mismatch_error. The exchange is itself a barrier. On host memory, in worlds of up to 8 ranks,
// its messages also carry small collectives (check/carried.hpp): the check and the data in one
// exchange. Where the backend's messages are sized, they carry 64-bit digests of the fingerprints
// instead of the fingerprints (check/carried.hpp, brief); where the digests differ, a second
// exchange of the full fingerprints names the field. A communicator that is destroyed sends the
// ranks that hear from it a `left` notice, which stands in for its part of the next exchange:
// ranks still calling collectives learn that it left instead of waiting out their deadline.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/carried.hpp"
#include "distcomm/check/exchange.hpp"
#include "distcomm/check/fingerprint.hpp"
#include "distcomm/check/gate.hpp"
#include "distcomm/check/hooks.hpp"
#include "distcomm/check/stall.hpp"
#include "distcomm/core/coarse_clock.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::check {

template <class B>
class call_check {
 public:
  call_check(bool enabled, call_settings settings) : enabled_(enabled), settings_(settings) {}
  // A moved-from call_check is disabled: its communicator has no backend left to exchange or
  // say goodbye on.
  call_check(call_check&& o) noexcept
      : enabled_(std::exchange(o.enabled_, false)),
        settings_(o.settings_),
        seq_(o.seq_),
        agreements_(o.agreements_),
        overlapped_(o.overlapped_),
        peer_left_(o.peer_left_),
        x_(std::move(o.x_)) {}
  call_check& operator=(call_check&& o) noexcept {
    if (this != &o) {
      enabled_ = std::exchange(o.enabled_, false);
      settings_ = o.settings_;
      seq_ = o.seq_;
      agreements_ = o.agreements_;
      overlapped_ = o.overlapped_;
      peer_left_ = o.peer_left_;
      x_ = std::move(o.x_);
    }
    return *this;
  }

  // Logs a wait in the agreement longer than `every` (DISTCOMM_STALL_WARNING), naming the rank
  // waited for (check/stall.hpp).
  void watch_stalls(int rank, std::chrono::duration<double> every) {
    if (enabled_) x_.watch(stall_watch::make(rank, every));
  }

  bool enabled() const noexcept { return enabled_; }
  // Whether agree() exchanges anything in a world of `p` ranks.
  bool exchanges(int p) const noexcept { return enabled_ && p > 1; }
  const call_settings& settings() const noexcept { return settings_; }
  // The settings of the calls from now on (communicator::retune, on every rank alike).
  void retune(const call_settings& s) noexcept { settings_ = s; }
  std::uint64_t calls() const noexcept { return seq_; }              // collectives started so far
  std::uint64_t agreements() const noexcept { return agreements_; }  // exchanged so far
  // Of those, the ones a gate ran while the call's first messages travelled (check/gate.hpp).
  std::uint64_t overlapped() const noexcept { return overlapped_; }
  // Whether the last agree() also compared alltoallv's counts (check/carried.hpp).
  bool counts_agreed() const noexcept { return counts_agreed_; }
  // True when the last agree() failed because a peer's communicator was destroyed.
  bool peer_left() const noexcept { return peer_left_; }

  // Agrees on `mine` with every rank (it gets this rank's number and the next sequence number);
  // throws mismatch_error when any rank's differs, timeout_error or peer_lost_error from the
  // backend when a peer does not take part in time. Returns whether an exchange ran (it did not
  // when the check is off or the world has one rank). After a mismatch between ranks that are all
  // still here, every rank has finished the same exchange: the next one pairs up as usual. After
  // peer_left(), the communicator is of no further use. A collective small enough to ride in the
  // exchange (`data`, check/carried.hpp) is done by it where the backend's messages carry:
  // data->done says so, its result in data->out (alltoallv's counts are compared only:
  // counts_agreed()).
  // `early`: the sends this rank made before the agreement (check/gate.hpp), drained with every
  // other rank's after a mismatch.
  // A call begun (begin()) completes here, with `early` given.
  bool agree(B& b, call_fingerprint mine, const char* what, deadline until,
             carried_call* data = nullptr, const std::vector<early_send>* early = nullptr) {
    const int p = b.size();
    if (begun_) {
      begun_ = false;
      mine = begun_fp_;
    } else {
      mine = numbered(b, mine);
      if (!exchanges(p)) return false;
      ++agreements_;
    }
    if constexpr (detail::defers_agreement<B>::value) {
      deferred_.state.lo = deferred_.state.hi = deferred_.mine = mine;
      deferred_.state.sender = x_.nonce();
      deferred_.what = what;
      deferred_.until = until;
      deferred_.pending = true;
      b.defer_agreement(&deferred_);
      return true;
    } else if constexpr (detail::has_native_agree<B>::value) {
      agreement merged{mine, mine, x_.nonce()};
      b.native_agree(merged, what, until);
      peer_left_ = is_left(merged.hi);
      if (!merged.agreed()) throw mismatch_error(describe_mismatch(what, merged, mine));
      return true;
    }
    const int r = b.rank();
    const std::size_t limit = carried_limit<B>(p);
    const std::size_t rounds = x_.prepare(p, limit);
    const bool carry = carries(p, data);
    // Where messages are sized, contributions lie 8-byte aligned (the widest dtype) at the
    // call's own size: an 8-byte call and the brief make 40 bytes, one cache line with MPI's
    // header.
    const std::size_t stride = !sized_messages<B> ? limit : carry ? (data->bytes() + 7) / 8 * 8 : 0;
    if (carry) x_.known().start(p, r, stride, data->in, x_.own_payload(), data->bytes());
    const std::uint64_t d = digest(mine);
    using merged = typename dissemination<B>::merged;
    merged state{{mine, mine, x_.nonce()}, {brief::magic, d, d, x_.nonce()}};
    x_.run(b, state, mine, what, until, sized_messages<B>, carry ? data : nullptr, stride);
    peer_left_ = x_.peer_left();
    if (sized_messages<B> && !peer_left_ && state.digests.lo != state.digests.hi) {
      // The digests differ: a second exchange, which every rank makes alike, names the field.
      merged full{{mine, mine, x_.nonce()}, {}};
      x_.run(b, full, mine, what, until, false, nullptr, 0);
      peer_left_ = x_.peer_left();
      state.full = full.full;
      if (state.full.agreed()) {
        drain(b, early, until);
        throw mismatch_error(std::string(what) + ": digests differ");
      }
    }
    if (!state.full.agreed()) {
      drain(b, early, until);
      throw mismatch_error(describe_mismatch(what, state.full, mine));
    }
    if constexpr (sized_messages<B>) check_sizes(x_.received_sizes(), rounds, p, stride, what, r);
    if (carry) {
      x_.known().finish(*data, r);  // throws where alltoallv's counts disagree
      data->done = data->completes();
      counts_agreed_ = !data->completes();
    }
    return true;
  }

  // The first half of agree() for a call behind the gate (check/gate.hpp), where exchanges(p):
  // the call takes its number, and the exchange's first message leaves now, ahead of the call's
  // own (on a transport that keeps one ordered stream per peer, TCP's, it would otherwise queue
  // behind them). agree() completes it, with the sends the call made since.
  void begin(B& b, call_fingerprint mine) {
    mine = numbered(b, mine);
    ++agreements_;
    ++overlapped_;
    const int p = b.size();
    x_.prepare(p, carried_limit<B>(p));
    const std::uint64_t d = digest(mine);
    x_.send_first(b, {{mine, mine, x_.nonce()}, {brief::magic, d, d, x_.nonce()}},
                  sized_messages<B> ? 0 : carried_limit<B>(p));
    begun_fp_ = mine;
    begun_ = true;
  }

  // Whether agree() would carry `data` in a world of p ranks (check/carried.hpp).
  bool carries(int p, const carried_call* data) const noexcept {
    const std::size_t limit = carried_limit<B>(p);
    return data && limit != 0 && data->fits(limit, p);
  }

  // A collective whose caller established the agreement already (communicator::
  // next_call_agreed()): it takes its sequence number, and nothing is exchanged.
  void skip() noexcept {
    ++seq_;
    counts_agreed_ = false;
    deferred_.pending = deferred_.exchanged = false;
  }

  // After the collective's body returned: a deferred agreement the body did not exchange (it
  // touched no transport: nothing to move, or a barrier) is exchanged now, and settled.
  void complete_deferred(B& b) {
    if constexpr (detail::defers_agreement<B>::value) {
      if (!deferred_.pending) return;
      b.defer_agreement(nullptr);
      deferred_.pending = false;
      b.native_agree(deferred_.state, deferred_.what, deferred_.until);
      deferred_.exchanged = true;
      peer_left_ = is_left(deferred_.state.hi);
      deferred_.settle();
    } else {
      (void)b;
    }
  }

  // After the collective's body threw: whether it threw the deferred agreement's own
  // mismatch_error (every rank raised it after the same exchange, before any caller's buffer
  // was touched: the communicator stays usable unless peer_left()). A deferred agreement not
  // exchanged is dropped.
  bool deferred_mismatch(B& b) noexcept {
    if constexpr (detail::defers_agreement<B>::value) {
      if (deferred_.pending) {
        b.defer_agreement(nullptr);
        deferred_.pending = false;
      }
      if (!deferred_.exchanged) return false;
      peer_left_ = is_left(deferred_.state.hi);
      return !deferred_.state.agreed();
    } else {
      (void)b;
      return false;
    }
  }

  // Tells the ranks that would hear from this one in the next exchange that this communicator is
  // gone after calls() collectives. Bounded, never throws: a peer that already left or failed is
  // simply not told. A communicator that made no collective sends nothing (see receive()).
  void leave(B& b) noexcept {
    // A moved-from check (its communicator was moved from) is disabled and must not touch the
    // backend, which was moved from with it.
    if (!enabled_ || seq_ == 0) return;
    const int p = b.size();
    if (!exchanges(p)) return;
    if constexpr (detail::has_native_agree<B>::value) {
      call_fingerprint f;
      f.kind = static_cast<std::uint32_t>(call_kind::left);
      f.seq = seq_;
      f.rank = b.rank();
      b.native_leave(agreement{f, f, x_.nonce()});
      return;
    }
    if constexpr (!distcomm::detail::unreceived_messages_ok<B>::value) return;
    if (!distcomm::detail::unreceived_messages_ok_at(b)) return;
    try {
      call_fingerprint f;
      f.kind = static_cast<std::uint32_t>(call_kind::left);
      f.seq = seq_;
      f.rank = b.rank();
      x_.send_notices(b, p, agreement{f, f, x_.nonce()});
    } catch (...) {
    }
  }

 private:
  // `mine` as this rank's next call: its sequence number and rank; what the last call left
  // (counts compared, a deferred agreement) is cleared.
  call_fingerprint numbered(B& b, call_fingerprint mine) noexcept {
    mine.seq = seq_++;
    mine.rank = b.rank();
    counts_agreed_ = false;
    deferred_.pending = deferred_.exchanged = false;
    return mine;
  }

  // After a mismatch every rank found in the same exchange: the messages sent early are taken
  // (gate.hpp), unless a peer left (the communicator is of no further use then).
  void drain(B& b, const std::vector<early_send>* early, deadline until) {
    if (peer_left_) return;
    static const std::vector<early_send> none;
    drain_early(b, early ? *early : none, until);
  }

  bool enabled_ = false;
  call_settings settings_;
  std::uint64_t seq_ = 0;
  std::uint64_t agreements_ = 0;
  std::uint64_t overlapped_ = 0;
  bool begun_ = false;         // begin() ran, agree() completes it
  call_fingerprint begun_fp_;  // the begun call's, numbered
  bool counts_agreed_ = false;
  bool peer_left_ = false;
  dissemination<B> x_;           // the exchange, its messages kept between calls
  deferred_agreement deferred_;  // the backend carries it (defers_agreement)
};

}  // namespace distcomm::check
