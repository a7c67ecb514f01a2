// check::dissemination<B>: the exchange in which call_check (check/agree.hpp) agrees: ceil(log2 p)
// rounds; in round k rank r sends what it knows to r + 2^k and hears from r - 2^k, so that every
// rank ends with the same extremes of all fingerprints (or of their digests, check/carried.hpp's
// brief). Its messages may carry small collectives (check/carried.hpp). A communicator that is
// destroyed sends the ranks that hear from it a `left` notice on the same tag, which stands in for
// its part of the next exchange. Every message carries its sender's nonce (random per
// communicator), so a notice of another communicator on the same transport is recognised and
// skipped. Round k's receive waits k staggers past the deadline, so that a rank stopped before a
// collective is named by the rank waiting on it directly, not by one waiting on a healthy rank held
// up by it (see round_stagger()).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <random>
#include <string>
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
class dissemination {
 public:
  // What an exchange has learnt: the full extremes, and the digests' where briefs travel.
  struct merged {
    agreement full;
    brief digests;
  };

  // Lays the messages out for a world of p ranks carrying contributions up to `limit` bytes;
  // returns the number of rounds.
  std::size_t prepare(int p, std::size_t limit) {
    const std::size_t rounds = sent_.layout(p, limit, sized_messages<B>);
    received_.layout(p, limit, sized_messages<B>);
    sources_.resize(rounds, 0);
    got_.resize(rounds, 0);
    return rounds;
  }
  // Where this rank's own contribution goes (known().start()).
  unsigned char* own_payload() noexcept { return sent_.payload(0); }
  contributions& known() noexcept { return known_; }
  // Each round's received size, where messages are sized.
  const std::size_t* received_sizes() const noexcept { return got_.data(); }
  std::uint64_t nonce() const noexcept { return nonce_; }
  bool peer_left() const noexcept { return peer_left_; }
  // Logs waits longer than its period (DISTCOMM_STALL_WARNING), null for none.
  void watch(std::shared_ptr<stall_watch> w) noexcept { watch_ = std::move(w); }

  // Round 0's message of the next run(), sent now (call_check::begin(): nothing carried, the
  // brief where messages are sized). A send that fails because its peer is gone is settled by
  // run(), as its own would be.
  void send_first(B& b, const merged& s, std::size_t stride) {
    const int p = b.size();
    const std::size_t n = put_round(0, s, sized_messages<B>, p, stride);
    first_failure_ = nullptr;
    try {
      first_ = b.isend(sent_.message(0), n, (b.rank() + 1) % p, tag_agree);
    } catch (const peer_lost_error&) {
      first_failure_ = std::current_exception();
    }
    first_sent_ = true;
  }

  // One exchange of `s` for the collective `what` (this rank's fingerprint `mine`), its messages
  // in brief while `brief_form` and no departure is known, with `data`'s contributions at
  // `stride` where it carries (known()). Throws timeout_error or peer_lost_error as
  // call_check::agree() says; peer_left() tells whether a peer's communicator was destroyed.
  void run(B& b, merged& s, const call_fingerprint& mine, const char* what, deadline until,
           bool brief_form, const carried_call* data, std::size_t stride) {
    what_ = what;
    const int p = b.size();
    const int r = b.rank();
    const std::size_t rounds = sources_.size();
    const clock::duration stagger = round_stagger(until);
    // The first send apart: no allocation at two ranks, the common case of a latency test.
    request first;
    std::vector<request> more;
    std::vector<int> gone;  // peers whose notice this rank received itself
    std::exception_ptr send_failure;
    int late = -1;  // the first peer whose message came after `until`
    clock::duration late_by{};
    for (std::size_t k = 0; k < rounds; ++k) {
      const bool in_brief = brief_form && !is_left(s.full.hi);
      const bool ahead = k == 0 && first_sent_;  // its message is on its way (send_first())
      const std::size_t n = ahead ? 0 : put_round(k, s, in_brief, p, stride);
      if (data && !ahead && (in_brief || !sized_messages<B>)) {
        known_.fill(sent_.payload(k), r, k, data->bytes());
      }
      const int to = (r + (1 << k)) % p;
      request sr;
      // Nothing is sent to a rank known to have left (its connection may be closed already);
      // a send that fails because its peer is gone counts only if no departure explains it.
      const bool to_gone = std::find(gone.begin(), gone.end(), to) != gone.end() ||
                           (is_left(s.full.hi) && s.full.hi.rank == to);
      if (ahead) {
        first_sent_ = false;
        sr = std::move(first_);
        if (first_failure_ && !send_failure) send_failure = first_failure_;
      } else if (!to_gone) {
        try {
          sr = b.isend(sent_.message(k), n, to, tag_agree);
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
      bool got_brief = false;
      try {
        if (receive(b, k, from, mine.seq, round_deadline(until, stagger, k), got_brief))
          gone.push_back(from);
      } catch (const timeout_error& e) {
        throw timeout_error(not_started_message(what_, from, mine.seq, r, k, p, e.what()));
      }
      if (late < 0 && coarse_now() > until) {  // deadlines in seconds: the tick time will do
        late = from;
        late_by = coarse_now() - until;
      }
      if (got_brief) {
        s.digests.merge(received_.get_brief(k));
      } else {
        s.full.merge(received_.get(k));
      }
      if (data && (got_brief || !sized_messages<B>)) {
        known_.learn(received_.payload(k), from, k);
      }
    }
    peer_left_ = is_left(s.full.hi);
    if (peer_left_) gone.push_back(s.full.hi.rank);
    if (send_failure && !peer_left_) std::rethrow_exception(send_failure);
    // A round that ended in its stagger: the collective is past its deadline already, and the
    // data would fail on the first wait, naming whichever peer it waits for. The late rank (a
    // stopped rank that a launcher continued as it ended the job, under mpirun) is named instead.
    if (late >= 0 && !peer_left_) {
      throw timeout_error(late_start_message(what_, late, mine.seq,
                                             std::chrono::duration<double>(late_by).count()));
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
  }

  // Sends `notice` (a departure) to the ranks that hear from this one in the next exchange,
  // without waiting more than a moment.
  void send_notices(B& b, int p, const agreement& notice) {
    // Each round's notice has that round's size, or an agreement's where messages are sized
    // (the exchange's own buffer: no call runs now).
    const std::size_t rounds = sent_.layout(p, carried_limit<B>(p), sized_messages<B>);
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
  }

 private:
  using request = typename detail::request_of<B>::type;

  // Writes round k's message of `s` (its brief, or its full extremes) and returns its size.
  std::size_t put_round(std::size_t k, const merged& s, bool in_brief, int p, std::size_t stride) {
    if (in_brief) {
      sent_.put(k, s.digests);
      return sized_message_bytes(p, k, stride);
    }
    sent_.put(k, s.full);
    return sized_messages<B> ? sizeof(agreement) : sent_.bytes(k);
  }

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
  bool receive(B& b, std::size_t k, int from, std::uint64_t seq, deadline until, bool& got_brief) {
    struct watched {
      stall_watch* w;
      ~watched() {
        if (w) w->done();
      }
    } const mark{watch_.get()};
    if (watch_) watch_->waiting(what_, seq, from);
    for (;;) {
      if constexpr (sized_messages<B>) {
        got_[k] = 0;
        b.irecv_up_to(received_.message(k), received_.bytes(k), &got_[k], from, tag_agree)
            .wait(until);
        if (is_brief(received_.message(k), got_[k])) {
          sources_[k] = received_.get_brief(k).sender;
          got_brief = true;
          return false;
        }
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

  bool peer_left_ = false;
  bool first_sent_ = false;           // round 0's message went ahead (send_first())
  request first_;                     // its send
  std::exception_ptr first_failure_;  // its peer_lost_error, if any
  std::uint64_t nonce_ = new_nonce();
  exchange_messages sent_;  // each round's message: kept between calls
  exchange_messages received_;
  contributions known_;                 // a carried collective's
  std::vector<std::uint64_t> sources_;  // the nonce of each round's source, once known
  std::vector<std::size_t> got_;        // each round's received size, where messages are sized
  std::shared_ptr<stall_watch> watch_;  // DISTCOMM_STALL_WARNING, else null
  const char* what_ = nullptr;          // the collective being agreed on
};

}  // namespace distcomm::check
