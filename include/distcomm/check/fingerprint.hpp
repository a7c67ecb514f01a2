// What ranks compare before a collective moves data: a fixed-size fingerprint of the call (which
// collective, dtype, count, op, root, the tensors of a grouped call, the settings that choose the
// algorithm, and the call's sequence number). check/agree.hpp exchanges them; a difference becomes
// a mismatch_error on every rank whose message comes from describe_mismatch() below.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm::check {

// The collective a fingerprint describes. `left` is the notice of a communicator that was
// destroyed: it sorts last, so it is always the `hi` of a disagreement.
enum class call_kind : std::uint32_t {
  allreduce = 1,
  grouped_allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  barrier,
  alltoall,
  alltoallv,
  allgatherv,
  reduce,
  gather,
  scatter,
  point_to_point,  // send / recv: no agreement (only two ranks take part)
  left = 0xffff,
};

const char* to_string(call_kind k) noexcept;

// Plain data, the same bytes on every rank of a job (one machine architecture per job): sent as
// is. Fields that do not apply to a collective are zero; root is -1 where there is none.
struct call_fingerprint {
  std::uint64_t seq = 0;           // collectives this communicator made before this one
  std::uint64_t count = 0;         // elements (grouped: of all tensors; reduce_scatter: per rank)
  std::uint64_t tensors_hash = 0;  // grouped: the tensors' counts and dtypes, in order
  std::uint64_t segment_bytes = 0;
  std::uint64_t fusion_threshold = 0;  // grouped calls only
  std::uint64_t fusion_cutoff = 0;     // grouped calls only
  std::uint64_t algo_hash = 0;         // the strategy type and the automatic table
  std::uint32_t kind = 0;              // call_kind
  std::int32_t type = -1;              // dtype, -1 for none (barrier, grouped)
  std::int32_t op = -1;                // reduce_op, -1 for none
  std::int32_t root = -1;
  std::uint32_t tensors = 0;  // grouped: number of tensors
  std::uint32_t deterministic = 0;
  std::int32_t ps_servers = 0;
  std::int32_t rank = -1;  // who sent it (not compared)
};

// The settings part of every fingerprint, computed once per communicator.
struct call_settings {
  std::uint64_t segment_bytes = 0;
  std::uint64_t fusion_threshold = 0;
  std::uint64_t fusion_cutoff = 0;
  std::uint64_t algo_hash = 0;
  std::uint32_t deterministic = 0;
  std::int32_t ps_servers = 0;
};
call_settings settings_of(const config& c, const char* strategy_name);

// A fingerprint of one call, with the settings filled in.
call_fingerprint make_fingerprint(call_kind kind, const call_settings& s, std::size_t count = 0,
                                  int type = -1, int op = -1, int root = -1);
// A grouped allreduce: the number of tensors, their total count and a hash of (count, dtype) in
// order, plus the fusion settings (they decide which collectives run).
call_fingerprint grouped_fingerprint(span<const tensor_view> tensors, int op,
                                     const call_settings& s);
// A collective with one count per rank that every rank passes alike (allgatherv): their number,
// total and a hash of them in order.
call_fingerprint counts_fingerprint(call_kind kind, span<const std::size_t> counts, int type,
                                    const call_settings& s);

// FNV-1a of `n` bytes: the same on every rank of one build (group lists, host names).
std::uint64_t hash_bytes(const void* data, std::size_t n) noexcept;

// Total order on everything but `rank`; equal means the ranks agree.
int compare(const call_fingerprint& a, const call_fingerprint& b) noexcept;
// 64 bits of everything compare() looks at: equal fingerprints have equal digests, and a digest
// is never 0 (a transport may mark a notice with 0). A few multiplies: a transport that publishes
// it where peers look anyway (shm, beside its arrival counter) reads the full fingerprints only
// when digests differ.
std::uint64_t digest(const call_fingerprint& f) noexcept;

// The extremes of the fingerprints of a set of ranks: lo and hi under compare(), ties to the lower
// rank. Merging is idempotent, so the overlapping sets of a dissemination exchange are fine.
struct agreement {
  call_fingerprint lo;
  call_fingerprint hi;
  std::uint64_t sender = 0;  // the nonce of the communicator that sent it (not merged)
  void merge(const agreement& other) noexcept;
  bool agreed() const noexcept;
};

// The message of the mismatch_error every rank raises: the field that differs, the two ranks and
// both values, what to do; `what` names the collective, `mine` is this rank's fingerprint.
std::string describe_mismatch(const char* what, const agreement& a, const call_fingerprint& mine);

// An agreement carried by the collective's own first exchange instead of one of its own before
// it (a backend with `void defer_agreement(deferred_agreement*) noexcept`: shm, whose collectives
// publish the fingerprints in the arrival that publishes the data). call_check hands it over
// pending; the backend's next operation exchanges it, merging the peers' into `state`, and calls
// settle() before it touches any caller's buffer, or exchanges it alone first where it cannot.
struct deferred_agreement {
  agreement state;                                // this rank's, then every rank's merged
  call_fingerprint mine;                          // this rank's fingerprint, for the message
  const char* what = nullptr;                     // the collective
  std::chrono::steady_clock::time_point until{};  // the collective's deadline
  bool pending = false;                           // handed over, not yet exchanged
  bool exchanged = false;                         // `state` holds every rank's
  // After the exchange: the mismatch_error every rank raises alike when the ranks differ.
  void settle() const {
    if (!state.agreed()) throw mismatch_error(describe_mismatch(what, state, mine));
  }
};

// The notice of a communicator that was destroyed (call_kind::left).
inline bool is_left(const call_fingerprint& f) noexcept {
  return f.kind == static_cast<std::uint32_t>(call_kind::left);
}

// The timeout_error of an exchange whose round `round` heard nothing from `from` (this rank is
// `me` of `p`; `seq` the collective's sequence number): what that rank may be doing, and after
// round 0 which ranks it may be waiting for itself; `transport` is the backend's message.
std::string not_started_message(const char* what, int from, std::uint64_t seq, int me,
                                std::size_t round, int p, const std::string& transport);
// The timeout_error of an exchange that ended after its deadline because `rank`'s message came
// `late_s` seconds late.
std::string late_start_message(const char* what, int rank, std::uint64_t seq, double late_s);

// The mismatch_error every rank of an alltoallv raises when rank `from` sends `sent` elements to
// rank `to`, which expects `expected` (the first such pair every rank finds alike).
std::string counts_mismatch_message(std::uint64_t from, std::uint64_t to, std::uint64_t sent,
                                    std::uint64_t expected);

// alltoallv's counts compared pair by pair in the same order on every rank (the lowest receiver,
// from its lowest sender), so that every rank holding every rank's counts raises the same
// mismatch_error: `sent(from, to)` is what rank `from` sends to rank `to`, `expected(to, from)`
// what rank `to` expects from it.
template <class Sent, class Expected>
void compare_counts(std::size_t p, Sent sent, Expected expected) {
  for (std::size_t to = 0; to < p; ++to) {
    for (std::size_t from = 0; from < p; ++from) {
      const std::uint64_t s = sent(from, to);
      const std::uint64_t e = expected(to, from);
      if (s != e) throw mismatch_error(counts_mismatch_message(from, to, s, e));
    }
  }
}

// "1st", "2nd", "3rd", "4th", ..., "11th", "21st".
std::string ordinal(std::uint64_t n);

}  // namespace distcomm::check
