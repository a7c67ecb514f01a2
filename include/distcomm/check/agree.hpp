// call_check<B>: before a collective moves data, the ranks agree on its fingerprint
// (check/fingerprint.hpp). A dissemination exchange (ceil(log2 p) rounds; in round k rank r sends
// what it knows to r + 2^k and hears from r - 2^k) leaves every rank with the same extremes of all
// fingerprints, so either every rank goes on or every rank raises the same mismatch_error. The
// exchange is itself a barrier. On host memory, in worlds of up to 8 ranks, its messages also
// carry small collectives (check/carried.hpp): the check and the data in one exchange. A
// communicator that is destroyed sends the ranks that hear from it a `left` notice on the same tag,
// which stands in for its part of the next exchange: ranks still calling collectives learn that it
// left instead of waiting out their deadline. Every message carries its sender's nonce (random per
// communicator), so a notice of another communicator on the same transport is recognised and
// skipped. Round k's receive waits k staggers past the deadline, so that a rank stopped before a
// collective is named by the rank waiting on it directly, not by one waiting on a healthy rank held
// up by it (see round_stagger()).
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
#include "distcomm/check/fingerprint.hpp"
#include "distcomm/check/hooks.hpp"
#include "distcomm/check/stall.hpp"
#include "distcomm/core/coarse_clock.hpp"
#include "distcomm/core/error.hpp"

namespace distcomm::check {

// Apart from the strategies' tags (strategy/detail.hpp), below MPI's guaranteed MPI_TAG_UB.
inline constexpr tag_t tag_agree = 31;

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
        peer_left_(o.peer_left_),
        nonce_(o.nonce_),
        sent_(std::move(o.sent_)),
        received_(std::move(o.received_)),
        sources_(std::move(o.sources_)),
        got_(std::move(o.got_)),
        watch_(std::move(o.watch_)) {}
  call_check& operator=(call_check&& o) noexcept {
    if (this != &o) {
      enabled_ = std::exchange(o.enabled_, false);
      settings_ = o.settings_;
      seq_ = o.seq_;
      agreements_ = o.agreements_;
      peer_left_ = o.peer_left_;
      nonce_ = o.nonce_;
      sent_ = std::move(o.sent_);
      received_ = std::move(o.received_);
      sources_ = std::move(o.sources_);
      got_ = std::move(o.got_);
      watch_ = std::move(o.watch_);
    }
    return *this;
  }

  // Logs a wait in the agreement longer than `every` (DISTCOMM_STALL_WARNING), naming the rank
  // waited for (check/stall.hpp).
  void watch_stalls(int rank, std::chrono::duration<double> every) {
    if (enabled_) watch_ = stall_watch::make(rank, every);
  }

  bool enabled() const noexcept { return enabled_; }
  // Whether agree() exchanges anything in a world of `p` ranks.
  bool exchanges(int p) const noexcept { return enabled_ && p > 1; }
  const call_settings& settings() const noexcept { return settings_; }
  // The settings of the calls from now on (communicator::retune, on every rank alike).
  void retune(const call_settings& s) noexcept { settings_ = s; }
  std::uint64_t calls() const noexcept { return seq_; }              // collectives started so far
  std::uint64_t agreements() const noexcept { return agreements_; }  // exchanged so far
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
  bool agree(B& b, call_fingerprint mine, const char* what, deadline until,
             carried_call* data = nullptr) {
    mine.seq = seq_++;
    mine.rank = b.rank();
    counts_agreed_ = false;
    what_ = what;
    deferred_.pending = deferred_.exchanged = false;
    const int p = b.size();
    if (!exchanges(p)) return false;
    ++agreements_;
    if constexpr (detail::defers_agreement<B>::value) {
      deferred_.state.lo = deferred_.state.hi = deferred_.mine = mine;
      deferred_.state.sender = nonce_;
      deferred_.what = what;
      deferred_.until = until;
      deferred_.pending = true;
      b.defer_agreement(&deferred_);
      return true;
    } else if constexpr (detail::has_native_agree<B>::value) {
      agreement merged{mine, mine, nonce_};
      b.native_agree(merged, what, until);
      peer_left_ = is_left(merged.hi);
      if (!merged.agreed()) throw mismatch_error(describe_mismatch(what, merged, mine));
      return true;
    }
    const int r = b.rank();
    const std::size_t limit = carried_limit<B>(p);
    const std::size_t rounds = sent_.layout(p, limit);
    received_.layout(p, limit);
    sources_.resize(rounds, 0);
    got_.resize(rounds, 0);
    agreement state{mine, mine, nonce_};
    const bool carry = data && limit != 0 && data->fits(limit);
    // Where messages are sized, contributions lie 16-byte aligned at the call's own size.
    const std::size_t stride = !sized_messages<B> ? limit
                               : carry            ? (data->bytes() + 15) / 16 * 16
                                                  : 0;
    if (carry) known_.start(p, r, stride, data->in, sent_.payload(0), data->bytes());
    const clock::duration stagger = round_stagger(until);
    // The first send apart: no allocation at two ranks, the common case of a latency test.
    request first;
    std::vector<request> more;
    std::vector<int> gone;  // peers whose notice this rank received itself
    std::exception_ptr send_failure;
    int late = -1;  // the first peer whose message came after `until`
    clock::duration late_by{};
    for (std::size_t k = 0; k < rounds; ++k) {
      sent_.put(k, state);
      if (carry) known_.fill(sent_.payload(k), r, k, data->bytes());
      const int to = (r + (1 << k)) % p;
      request sr;
      // Nothing is sent to a rank known to have left (its connection may be closed already);
      // a send that fails because its peer is gone counts only if no departure explains it.
      const bool to_gone = std::find(gone.begin(), gone.end(), to) != gone.end() ||
                           (is_left(state.hi) && state.hi.rank == to);
      if (!to_gone) {
        try {
          sr = b.isend(sent_.message(k),
                       sized_messages<B> ? sized_message_bytes(p, k, stride) : sent_.bytes(k), to,
                       tag_agree);
        } catch (const peer_lost_error&) {
          if (!send_failure) send_failure = std::current_exception();
        }
      }
      if (k == 0) {
        first = std::move(sr);
      } else {
        more.push_back(std::move(sr));
      }
      const int from = (r - (1 << k) + p) % p;
      try {
        if (receive(b, k, from, round_deadline(until, stagger, k))) gone.push_back(from);
      } catch (const timeout_error& e) {
        throw timeout_error(not_started_message(what, from, mine.seq, r, k, p, e.what()));
      }
      if (late < 0 && coarse_now() > until) {  // deadlines in seconds: the tick time will do
        late = from;
        late_by = coarse_now() - until;
      }
      state.merge(received_.get(k));
      if (carry) known_.learn(received_.payload(k), from, k);
    }
    peer_left_ = is_left(state.hi);
    if (peer_left_) gone.push_back(state.hi.rank);
    if (send_failure && !peer_left_) std::rethrow_exception(send_failure);
    // A round that ended in its stagger: the collective is past its deadline already, and the
    // data would fail on the first wait, naming whichever peer it waits for. The late rank (a
    // stopped rank that a launcher continued as it ended the job, under mpirun) is named instead.
    if (late >= 0 && !peer_left_) {
      throw timeout_error(
          late_start_message(what, late, mine.seq, std::chrono::duration<double>(late_by).count()));
    }
    // Every send is waited for, so that the ranks still here finish the exchange, except those
    // to a rank that left: nobody takes them (destroying them cancels them). Another rank that
    // left unseen may hold a send up: after a departure that wait is bounded and its failure
    // ignored, since this rank raises the departure anyway.
    const deadline grace = std::min(until, deadline_after(coarse_now(), std::chrono::seconds(1)));
    int k_send = 0;
    const auto settle = [&](request& req) {
      const int to = (r + (1 << k_send++)) % p;
      if (!peer_left_) return req.wait(round_deadline(until, stagger, rounds - 1));
      if (std::find(gone.begin(), gone.end(), to) != gone.end()) return;
      try {
        req.wait(grace);
      } catch (const std::exception&) {
      }
    };
    settle(first);
    for (auto& req : more) settle(req);
    if (!state.agreed()) throw mismatch_error(describe_mismatch(what, state, mine));
    if constexpr (sized_messages<B>) check_sizes(got_.data(), rounds, p, stride, what, r);
    if (carry) {
      known_.finish(*data, r);  // throws where alltoallv's counts disagree
      data->done = data->completes();
      counts_agreed_ = !data->completes();
    }
    return true;
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
      b.native_leave(agreement{f, f, nonce_});
      return;
    }
    if constexpr (!distcomm::detail::unreceived_messages_ok<B>::value) return;
    if (!distcomm::detail::unreceived_messages_ok_at(b)) return;
    try {
      call_fingerprint f;
      f.kind = static_cast<std::uint32_t>(call_kind::left);
      f.seq = seq_;
      f.rank = b.rank();
      const agreement notice{f, f, nonce_};
      // Each round's notice has that round's size, or an agreement's where messages are sized
      // (the exchange's own buffer: no call runs now).
      const std::size_t rounds = sent_.layout(p, carried_limit<B>(p));
      std::vector<request> sends;
      for (std::size_t k = 0; k < rounds; ++k) {
        sent_.put(k, notice);
        const int to = (b.rank() + (1 << k)) % p;
        const std::size_t n = sized_messages<B> ? sizeof(agreement) : sent_.bytes(k);
        if constexpr (distcomm::detail::has_send_detached<B>::value) {
          b.send_detached(sent_.message(k), n, to, tag_agree);
        } else {
          sends.push_back(b.isend(sent_.message(k), n, to, tag_agree));
        }
      }
      // Small messages leave at once on every network transport; the limit guards a wedged one.
      const deadline until = deadline_after(std::chrono::milliseconds(200));
      for (auto& s : sends) {
        try {
          s.wait(until);
        } catch (const std::exception&) {
          // That peer is gone or unreachable: it needs no notice.
        }
      }
    } catch (...) {
    }
  }

 private:
  using request = typename detail::request_of<B>::type;

  // How much later than the round before each round's receive gives up: a tenth of the time
  // left at the start of the exchange, at most 1 s. A rank stopped before a collective holds up
  // every other: the rank receiving from it in round k waits on it directly, while a rank
  // receiving from a healthy rank in round k waits on one held up in an earlier round (a rank
  // sends its round-k message only after its round k-1 receive). With one deadline for all
  // rounds, whichever gave up first named the rank it waited on: measured at 4 ranks under gloo,
  // rank 0 (waiting on rank 2, itself waiting on the stopped rank 1) blamed rank 2 in 20 of 24
  // runs. With later rounds giving up later, a direct waiter gives up first, naming the stopped
  // rank, and the others learn it from its abort (on backends whose abort says why: gloo, ucx)
  // before their own deadline. This holds while the ranks entered the collective less than one
  // stagger apart. The first error still comes at the deadline: the exchange can only end later,
  // by at most (rounds - 1) staggers (1 s at 3 or 4 ranks with DISTCOMM_TIMEOUT >= 10 s, 4 s at
  // 32), for a rank whose later-round peer is itself late.
  static clock::duration round_stagger(deadline until) {
    const clock::duration left = until - std::min(until, coarse_now());
    return std::min<clock::duration>(std::chrono::seconds(1), left / 10);
  }

  static deadline round_deadline(deadline until, clock::duration stagger, std::size_t k) {
    const clock::duration extra = stagger * static_cast<clock::duration::rep>(k);
    return until > deadline::max() - extra ? deadline::max() : until + extra;
  }

  // Completes round k's receive from `from`. Notices of other communicators on the same
  // transport (backends whose copies share it; an MPI context id reused after MPI_Comm_free)
  // are skipped: a peer's own notice carries the nonce its exchange messages carried, and none
  // can come before its first one (leave() sends nothing then). Returns whether what arrived is
  // `from`'s own notice.
  bool receive(B& b, std::size_t k, int from, deadline until) {
    struct watched {
      stall_watch* w;
      ~watched() {
        if (w) w->done();
      }
    } const mark{watch_.get()};
    if (watch_) watch_->waiting(what_, seq_ - 1, from);
    for (;;) {
      if constexpr (sized_messages<B>) {
        got_[k] = 0;
        b.irecv_up_to(received_.message(k), received_.bytes(k), &got_[k], from, tag_agree)
            .wait(until);
        check_size(got_[k], what_, b.rank(), from);
      } else {
        b.irecv(received_.message(k), received_.bytes(k), from, tag_agree).wait(until);
      }
      const agreement in = received_.get(k);
      if (!is_left(in.lo)) {
        sources_[k] = in.sender;
        return false;
      }
      if (sources_[k] != 0 && in.sender == sources_[k]) return true;
    }
  }

  static std::uint64_t new_nonce() {
    std::random_device rd;
    const std::uint64_t n = (std::uint64_t{rd()} << 32) ^ rd() ^
                            static_cast<std::uint64_t>(clock::now().time_since_epoch().count());
    return n == 0 ? 1 : n;
  }

  bool enabled_ = false;
  call_settings settings_;
  std::uint64_t seq_ = 0;
  std::uint64_t agreements_ = 0;
  bool counts_agreed_ = false;
  bool peer_left_ = false;
  std::uint64_t nonce_ = new_nonce();
  exchange_messages sent_;  // each round's message: kept between calls
  exchange_messages received_;
  contributions known_;                 // a carried collective's
  std::vector<std::uint64_t> sources_;  // the nonce of each round's source, once known
  std::vector<std::size_t> got_;        // each round's received size, where messages are sized
  std::shared_ptr<stall_watch> watch_;  // DISTCOMM_STALL_WARNING, else null
  deferred_agreement deferred_;         // the backend carries it (defers_agreement)
  const char* what_ = nullptr;          // the collective being agreed on
};

}  // namespace distcomm::check
