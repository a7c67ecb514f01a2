// A small collective carried by the call check's own exchange (check/agree.hpp). The agreement's
// dissemination exchange already costs one message latency per round; a collective of a few
// hundred bytes costs the same again. Carried, each message of the exchange holds, behind the
// agreement, the contributions its sender knows (round k: those of the 2^k ranks ending at the
// sender), so after the last round every rank has every rank's contribution: the check and the
// data in one exchange. An allreduce folds them in rank order (the same bits on every rank, the
// order of DISTCOMM_DETERMINISTIC); allgather, alltoall and broadcast copy what they need. Nothing
// is written to the caller's output before every rank's fingerprint is known to agree.
//
// So that a rank in a carried collective and a rank in any other collective still pair up (and
// raise the same mismatch_error), every agreement message of a communicator that may carry has
// the carried size of its round, data or not: the size depends on the world size alone. Where
// the backend's receives take any size up to a capacity (backend.hpp, irecv_up_to), a message
// has the size of what it carries instead, and a call that carries nothing sends the agreement
// alone: the limit is then a budget (sized_carried_budget), not a price every call pays.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/check/fingerprint.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/core/reduce_op.hpp"

namespace distcomm::check {

// The largest contribution carried, in bytes, and the largest world that carries: a round-k message
// grows by min(2^k, p) slots of that size, paid by every agreement of such a world, unless the
// messages are sized (below). A backend whose messages cost by their size at these sizes
// declares its own, `static constexpr std::size_t carried_bytes`. The default suits transports
// whose latency dwarfs a few KiB (TCP on loopback: 29 µs at 8 B and at 4 KiB alike on this
// machine kind, 2026-11-28).
inline constexpr std::size_t default_carried_bytes = 4096;
inline constexpr int carried_ranks = 8;
template <class B, class = void>
struct carried_bytes_of : std::integral_constant<std::size_t, default_carried_bytes> {};
template <class B>
struct carried_bytes_of<B, std::void_t<decltype(B::carried_bytes)>>
    : std::integral_constant<std::size_t, B::carried_bytes> {};

// The collective a call hands to call_check::agree(): each rank's contribution is `count`
// elements at `in`; `done` says the exchange carried it and `out` holds the result. allreduce:
// the rank-order fold; allgather: every contribution in rank order; alltoall: block r of every
// contribution (its input, p blocks); broadcast: root's contribution (in = out, the buffer).
struct carried_call {
  // alltoallv_counts: each rank's contribution is its send counts then its receive counts (2p
  // 64-bit words); the exchange compares them and the collective's data still moves after it.
  enum class collective : std::uint8_t {
    none,
    allreduce,
    allgather,
    alltoall,
    broadcast,
    alltoallv_counts
  };
  collective what = collective::none;
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t count = 0;
  dtype type = dtype::f32;
  reduce_op op = reduce_op::sum;
  int root = -1;
  bool done = false;

  std::size_t bytes() const noexcept { return count * dtype_size(type); }
  // Whether the exchange completes the collective (else it only checked alltoallv's counts).
  bool completes() const noexcept { return what != collective::alltoallv_counts; }
  // An alltoall carries its whole input to every rank, p times what each needs: it fits in a
  // p-th of the limit (MPI's own alltoall is 2-4× a carried one there, docs/PERFORMANCE.md).
  bool fits(std::size_t limit, int p) const noexcept {
    const std::size_t room =
        what == collective::alltoall ? limit / static_cast<std::size_t>(p) : limit;
    return count != 0 && bytes() <= room;
  }
};

// Whether backend B's agreement messages carry: host memory only (a device backend's data is not
// on the host to copy into a message).
template <class B>
inline constexpr bool may_carry = !distcomm::detail::moves_device_memory<B>::value;

// Whether B's agreement messages have the size of what they carry (B has irecv_up_to).
template <class B>
inline constexpr bool sized_messages = distcomm::detail::has_irecv_up_to<B>::value;

// What one rank receives of carried contributions in all (p - 1 of them) where messages are
// sized. At two ranks the carried exchange is then recursive doubling's single round with the
// agreement in front, and 64 KiB is where the backends' own tables leave recursive doubling for
// the ring or the transport's collective (docs/PERFORMANCE.md, "The mismatch check"). A backend
// whose messages change protocol below that declares `static constexpr std::size_t
// carried_budget` (mpi: one eager message).
inline constexpr std::size_t sized_carried_budget = std::size_t{64} << 10;
template <class B, class = void>
struct carried_budget_of : std::integral_constant<std::size_t, sized_carried_budget> {};
template <class B>
struct carried_budget_of<B, std::void_t<decltype(B::carried_budget)>>
    : std::integral_constant<std::size_t, B::carried_budget> {};

// The largest contribution a world of p ranks carries, 0 where it carries none: the same on every
// rank, a multiple of 16 bytes.
template <class B>
std::size_t carried_limit(int p) noexcept {
  if (!may_carry<B> || p < 2 || p > carried_ranks) return 0;
  if constexpr (sized_messages<B>) {
    return carried_budget_of<B>::value / static_cast<std::size_t>(p - 1) / 16 * 16;
  } else {
    return carried_bytes_of<B>::value;
  }
}

// The slots of round k's message in a world of p ranks that carries.
inline std::size_t carried_slots(int p, std::size_t k) noexcept {
  return std::min<std::size_t>(std::size_t{1} << k, static_cast<std::size_t>(p));
}

// Where messages are sized, they start with a brief instead of the agreement while no departure
// is known: the extremes of the digests of the fingerprints the sender knows (fingerprint.hpp's
// digest()), 32 bytes where the agreement takes 184, so that a small carried call fits one cache
// line of the transport (Open MPI's shared memory copies every line across cores). Equal
// fingerprints have equal digests; where the extremes differ, every rank learns it from the same
// exchange and a second one, of full agreements, names the field (check/agree.hpp).
struct brief {
  static constexpr std::uint64_t magic = 0xd15cc0deb41ef001;  // never a sequence number
  std::uint64_t mark = magic;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  std::uint64_t sender = 0;  // the nonce of the communicator that sent it
  void merge(const brief& o) noexcept {
    lo = std::min(lo, o.lo);
    hi = std::max(hi, o.hi);
  }
};
inline bool is_brief(const unsigned char* message, std::size_t bytes) noexcept {
  std::uint64_t w = 0;
  if (bytes >= sizeof(brief)) std::memcpy(&w, message, sizeof w);
  return w == brief::magic;
}

// The size of round k's message where messages are sized: the brief, then the slots of `stride`
// bytes it carries (none when the call carries nothing: stride 0).
inline std::size_t sized_message_bytes(int p, std::size_t k, std::size_t stride) noexcept {
  return sizeof(brief) + carried_slots(p, k) * stride;
}

// A sized message that cannot be one of the check's: mismatch_error.
inline void check_size(std::size_t got, const char* what, int me, int from) {
  if (got >= sizeof(agreement)) return;
  throw mismatch_error(std::string(what) + ": rank " + std::to_string(me) +
                       " received a call check message of " + std::to_string(got) +
                       " bytes from rank " + std::to_string(from) + ", shorter than " +
                       std::to_string(sizeof(agreement)) +
                       ": the ranks run different versions or the message is corrupt");
}

// After the fingerprints agreed, every rank carried the same call: each round's message has its
// size, or mismatch_error (a corrupt message) before anything is read from it.
inline void check_sizes(const std::size_t* got, std::size_t rounds, int p, std::size_t stride,
                        const char* what, int me) {
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t want = sized_message_bytes(p, k, stride);
    if (got[k] == want) continue;
    throw mismatch_error(std::string(what) + ": rank " + std::to_string(me) +
                         ": the call check's message of round " + std::to_string(k) + " has " +
                         std::to_string(got[k]) + " bytes, not " + std::to_string(want) +
                         ", though the fingerprints agree (a corrupt message)");
  }
}

// The messages of one side of an exchange (sent or received), one per round, laid out for a world
// of p ranks: the agreement (or the brief, where messages are sized), then the carried payload
// where the world carries. Nothing is allocated once laid out.
class exchange_messages {
 public:
  // Returns the number of rounds; `slot` is the carried bytes per contribution, 0 where the world
  // does not carry.
  std::size_t layout(int p, std::size_t slot, bool sized) {
    std::size_t rounds = 0;
    for (int d = 1; d < p; d *= 2) ++rounds;
    if (p == p_) return rounds;
    p_ = p;
    head_ = sized ? sizeof(brief) : sizeof(agreement);
    offsets_.assign(rounds + 1, 0);
    for (std::size_t k = 0; k < rounds; ++k) {
      const std::size_t n = std::max(sizeof(agreement), head_ + carried_slots(p, k) * slot);
      offsets_[k + 1] = offsets_[k] + (n + 15) / 16 * 16;
    }
    bytes_.assign(offsets_.back(), 0);
    return rounds;
  }
  unsigned char* message(std::size_t k) noexcept { return &bytes_[offsets_[k]]; }
  unsigned char* payload(std::size_t k) noexcept { return message(k) + head_; }
  void put(std::size_t k, const brief& a) noexcept { std::memcpy(message(k), &a, sizeof a); }
  brief get_brief(std::size_t k) noexcept {
    brief a;
    std::memcpy(&a, message(k), sizeof a);
    return a;
  }
  std::size_t bytes(std::size_t k) const noexcept { return offsets_[k + 1] - offsets_[k]; }
  void put(std::size_t k, const agreement& a) noexcept { std::memcpy(message(k), &a, sizeof a); }
  agreement get(std::size_t k) noexcept {
    agreement a;
    std::memcpy(&a, message(k), sizeof a);
    return a;
  }

 private:
  int p_ = 0;
  std::size_t head_ = sizeof(agreement);
  std::vector<std::size_t> offsets_;
  std::vector<unsigned char> bytes_;
};

// The contributions an exchange has seen so far, by rank: pointers into its own messages.
class contributions {
 public:
  // Starts an exchange of rank r of p: its own contribution goes into slot 0 of its round-0
  // payload, where the fold reads it (the caller's output may be its input).
  void start(int p, int r, std::size_t slot, const void* in, unsigned char* payload0,
             std::size_t bytes) noexcept {
    p_ = p;
    slot_ = slot;
    std::fill(known_, known_ + carried_ranks, nullptr);
    std::memcpy(payload0, in, bytes);
    known_[r] = payload0;
  }
  // A round's payload, from `sender`: slot j holds rank sender - j's contribution.
  void learn(const unsigned char* payload, int sender, std::size_t k) noexcept {
    for (std::size_t j = 0; j < carried_slots(p_, k); ++j) {
      const int q = ((sender - static_cast<int>(j)) % p_ + p_) % p_;
      if (!known_[q]) known_[q] = payload + j * slot_;
    }
  }
  // Fills round k's payload of rank r: the contributions of ranks r, r - 1, ..., which it knows.
  void fill(unsigned char* payload, int r, std::size_t k, std::size_t bytes) const noexcept {
    for (std::size_t j = 0; j < carried_slots(p_, k); ++j) {
      const int q = ((r - static_cast<int>(j)) % p_ + p_) % p_;
      if (known_[q] && known_[q] != payload + j * slot_) {
        std::memcpy(payload + j * slot_, known_[q], bytes);
      }
    }
  }
  // alltoallv: every rank holds every rank's send and receive counts, so every rank raises the
  // same mismatch_error where they disagree (compare_counts), before any data moved.
  void check_counts() const {
    const auto p = static_cast<std::size_t>(p_);
    const auto word = [&](std::size_t rank, std::size_t i) {
      std::uint64_t w;
      std::memcpy(&w, known_[rank] + i * sizeof w, sizeof w);
      return w;
    };
    compare_counts(
        p, [&](std::size_t from, std::size_t to) { return word(from, to); },
        [&](std::size_t to, std::size_t from) { return word(to, p + from); });
  }

  // Rank r's result from every rank's contribution (carried_call).
  void finish(const carried_call& a, int r) const {
    const std::size_t bytes = a.bytes();
    auto* out = static_cast<unsigned char*>(a.out);
    switch (a.what) {
      case carried_call::collective::allreduce:  // c[0] (op) c[1] (op) ..., then avg's division
        combine(out, known_[0], known_[1], a.count, a.type, a.op);
        for (int q = 2; q < p_; ++q) combine(out, out, known_[q], a.count, a.type, a.op);
        if (a.op == reduce_op::avg) divide(out, out, a.count, a.type, static_cast<std::size_t>(p_));
        break;
      case carried_call::collective::allgather:
        for (int q = 0; q < p_; ++q)
          std::memcpy(out + static_cast<std::size_t>(q) * bytes, known_[q], bytes);
        break;
      case carried_call::collective::alltoall: {
        const std::size_t block = bytes / static_cast<std::size_t>(p_);
        for (int q = 0; q < p_; ++q) {
          std::memcpy(out + static_cast<std::size_t>(q) * block,
                      known_[q] + static_cast<std::size_t>(r) * block, block);
        }
        break;
      }
      case carried_call::collective::broadcast:
        if (r != a.root) std::memcpy(out, known_[a.root], bytes);
        break;
      case carried_call::collective::alltoallv_counts:
        check_counts();
        break;
      case carried_call::collective::none:
        break;
    }
  }

 private:
  int p_ = 0;
  std::size_t slot_ = 0;
  const unsigned char* known_[carried_ranks] = {};
};

}  // namespace distcomm::check
