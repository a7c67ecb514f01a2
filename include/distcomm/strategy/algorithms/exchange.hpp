// The all-to-all family: every rank sends a block to every rank. Pairwise exchange (p-1 rounds,
// each block sent once, straight to its owner: the bandwidth-optimal one) for alltoall and
// alltoallv, and Bruck's algorithm (ceil(log2 p) rounds, each block forwarded up to log2 p times:
// fewer latencies for small blocks) for alltoall. Not part of the public API.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distcomm/check/fingerprint.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/algorithms/common.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::strategy::detail {

// One rank's side of an all-to-all, in elements: what it sends to rank q is
// in[send.begin(q), + send.count(q)), what it receives from rank q lands at out[recv.begin(q)].
// Equal blocks (alltoall) have no arrays: block q starts at q * block.
struct exchange_layout {
  const std::size_t* counts = nullptr;  // per rank, or null for equal blocks of `block`
  const std::size_t* displs = nullptr;
  std::size_t block = 0;
  std::size_t count(int q) const noexcept { return counts ? counts[q] : block; }
  std::size_t begin(int q) const noexcept {
    return displs ? displs[q] : static_cast<std::size_t>(q) * block;
  }
};

// A disagreement every rank of the collective found in the same exchange, before any data
// moved: the communicator stays usable, as after a fingerprint mismatch.
class agreed_mismatch_error : public mismatch_error {
 public:
  using mismatch_error::mismatch_error;
};

// One small message to and from every peer, on tag_alltoall_counts (a round's messages follow the
// previous round's from the same sender on that tag): mine[q] goes to rank q, theirs[q] comes
// from it. `words` 64-bit words each.
template <class B>
void exchange_words(B& b, const std::vector<std::uint64_t>& mine,
                    std::vector<std::uint64_t>& theirs, std::size_t words, deadline until) {
  using request = typename B::request;
  const int p = b.size();
  const int r = b.rank();
  std::vector<request> reqs;
  for (int k = 1; k < p; ++k) {
    const auto from = static_cast<std::size_t>(mod(r - k, p));
    const auto to = static_cast<std::size_t>(mod(r + k, p));
    reqs.push_back(b.irecv(&theirs[from * words], words * sizeof(std::uint64_t),
                           static_cast<int>(from), tag_alltoall_counts));
    reqs.push_back(b.isend(&mine[to * words], words * sizeof(std::uint64_t), static_cast<int>(to),
                           tag_alltoall_counts));
  }
  wait_all(reqs, until);
}

// alltoallv's counts, which no fingerprint can cover (they differ by design): each rank tells
// each peer how many elements it is about to send it; each rank then tells every peer the first
// count it did not expect (or none), so that every rank learns every disagreement and all raise
// the same agreed_mismatch_error, naming the pair and both counts, with nothing sent yet.
template <class B>
void agree_on_counts(B& b, const exchange_layout& send, const exchange_layout& recv,
                     deadline until) {
  const int p = b.size();
  const int r = b.rank();
  const auto pp = static_cast<std::size_t>(p);
  std::vector<std::uint64_t> told(pp), heard(pp);
  for (int q = 0; q < p; ++q) told[static_cast<std::size_t>(q)] = send.count(q);
  exchange_words(b, told, heard, 1, until);
  constexpr std::uint64_t none = ~std::uint64_t{0};
  std::vector<std::uint64_t> report = {none, none, none, none};  // sender, receiver, sent, expected
  for (int q = 0; q < p; ++q) {
    if (q != r && heard[static_cast<std::size_t>(q)] != recv.count(q)) {
      report = {static_cast<std::uint64_t>(q), static_cast<std::uint64_t>(r),
                heard[static_cast<std::size_t>(q)], recv.count(q)};
      break;
    }
  }
  std::vector<std::uint64_t> mine(4 * pp), reports(4 * pp, none);
  for (std::size_t q = 0; q < pp; ++q) std::copy(report.begin(), report.end(), &mine[4 * q]);
  exchange_words(b, mine, reports, 4, until);
  std::copy(report.begin(), report.end(), &reports[4 * static_cast<std::size_t>(r)]);
  for (std::size_t q = 0; q < pp; ++q) {  // the lowest receiver's report, the same on every rank
    const std::uint64_t* f = &reports[4 * q];
    if (f[0] == none) continue;
    throw agreed_mismatch_error(check::counts_mismatch_message(f[0], f[1], f[2], f[3]));
  }
}

// Pairwise exchange: at round k rank r sends to r+k and receives from r-k (every pair meets in
// exactly one round); the own block is copied. With `check_counts` (alltoallv) the ranks first
// agree on the counts (agree_on_counts). Host backends post every round at once (the transport
// overlaps them); lockstep ones round by round, each round's group matched by the peers' group
// of the same round.
template <class B>
void pairwise_alltoall(B& b, const void* in, const exchange_layout& send, void* out,
                       const exchange_layout& recv, dtype t, std::size_t seg, deadline until,
                       scratch& s, bool check_counts) {
  using request = typename B::request;
  auto&& m = memory_of(b, s);
  const int p = b.size();
  const int r = b.rank();
  const std::size_t es = dtype_size(t);
  // (On a device backend the counts would have to be staged in device memory: not checked.)
  if (check_counts && p > 1 && !moves_device_memory<B>::value)
    agree_on_counts(b, send, recv, until);
  copy_elems(m, bytes_at(out, recv.begin(r), es), bytes_at(in, send.begin(r), es), send.count(r),
             t);
  if (p == 1) return;
  std::vector<request> reqs;
  for (int k = 1; k < p; ++k) {
    const int from = mod(r - k, p);
    const int to = mod(r + k, p);
    post_recvs(b, reqs, out, segments(block{recv.begin(from), recv.count(from)}, seg), es, from,
               tag_alltoall);
    post_sends(b, reqs, in, segments(block{send.begin(to), send.count(to)}, seg), es, to,
               tag_alltoall);
    if constexpr (lockstep<B>) wait_all(reqs, until);
  }
  wait_all(reqs, until);
}

// Bruck's alltoall of equal blocks (host memory): rotate so that block i is the one for rank
// r+i; at round k (k = 1, 2, 4, ...) send every block whose index has bit k set to rank r+k and
// receive the same blocks from rank r-k; rotate back. Each round is one message of at most
// ceil(p/2) blocks, so for small blocks the ceil(log2 p) latencies beat pairwise's p-1.
template <class B>
void bruck_alltoall(B& b, const void* in, void* out, std::size_t block_count, dtype t,
                    deadline until, scratch& s) {
  static_assert(!moves_device_memory<B>::value, "bruck_alltoall packs blocks on the host");
  const int p = b.size();
  const int r = b.rank();
  const auto pp = static_cast<std::size_t>(p);
  const std::size_t bytes = block_count * dtype_size(t);
  // work: p blocks, rotated; pack and unpack: up to p/2 blocks each.
  unsigned char* work = s.get(bytes * (2 * pp + 2) + 1);
  unsigned char* pack = work + bytes * pp;
  unsigned char* unpack = pack + bytes * (pp / 2 + 1);
  const auto* src = static_cast<const unsigned char*>(in);
  for (int i = 0; i < p; ++i) {
    std::memcpy(work + static_cast<std::size_t>(i) * bytes,
                src + static_cast<std::size_t>(mod(r + i, p)) * bytes, bytes);
  }
  for (int k = 1; k < p; k <<= 1) {
    std::size_t n = 0;
    for (int i = 1; i < p; ++i) {
      if ((i & k) == 0) continue;
      std::memcpy(pack + n * bytes, work + static_cast<std::size_t>(i) * bytes, bytes);
      ++n;
    }
    auto rq = b.irecv(unpack, n * bytes, mod(r - k, p), tag_bruck);
    auto sq = b.isend(pack, n * bytes, mod(r + k, p), tag_bruck);
    rq.wait(until);
    sq.wait(until);
    n = 0;
    for (int i = 1; i < p; ++i) {
      if ((i & k) == 0) continue;
      std::memcpy(work + static_cast<std::size_t>(i) * bytes, unpack + n * bytes, bytes);
      ++n;
    }
  }
  // Block i now came from rank r-i.
  auto* dst = static_cast<unsigned char*>(out);
  for (int i = 0; i < p; ++i) {
    std::memcpy(dst + static_cast<std::size_t>(mod(r - i, p)) * bytes,
                work + static_cast<std::size_t>(i) * bytes, bytes);
  }
}

}  // namespace distcomm::strategy::detail
