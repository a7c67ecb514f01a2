// How one message of the mpi backend travels as MPI messages ("pieces"):
//  * above INT_MAX bytes, 1 GiB pieces (MPI counts are int);
//  * from eager_piece to split_limit bytes, pieces of eager_piece bytes and a last one of the rest,
//    possibly empty;
//  * otherwise one piece.
// Why split: Open MPI sends a message over shared memory (btl vader) eagerly only up to 4 KiB with
// its headers. A larger one takes the rendezvous protocol, and the backend, which matches a
// receive only once its message has arrived (MPI_Improbe, mpi.hpp), pays for its handshake in
// polls: exchanging 4,096 bytes between 2 processes took 3.5 us as one message and 1.6 us as
// 4,000 + 96 bytes, 8 KiB 3.7 us against 2.6 us as three pieces, and 16 KiB 4.3 us against 4.5
// (Open MPI 4.1, 2026-11-28 UTC). Open MPI's own collectives pay no such price: their receives
// are posted first.
// A piece of exactly eager_piece bytes always has another behind it, and no other message has
// that size. So a receiver that takes any size up to a capacity (irecv_up_to) knows where the
// message ends, and one that finds the wrong size knows whether more of it is still to come.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>

namespace distcomm::detail::mpi_pieces {

inline constexpr std::size_t max_piece = std::size_t{1} << 30;
inline constexpr std::size_t eager_piece = 4000;  // 4 KiB less room for Open MPI's headers
inline constexpr std::size_t split_limit = 3 * eager_piece;

// True where a piece of `got` bytes of a split message has more of that message behind it.
inline bool continues(int got) noexcept { return static_cast<std::size_t>(got) == eager_piece; }

// The pieces of a `bytes`-long message, as post(offset, bytes): what a sender sends and what a
// receiver of exactly that size expects.
template <class Post>
void for_each_piece(std::size_t bytes, Post&& post) {
  if (bytes > static_cast<std::size_t>(INT_MAX)) {
    for (std::size_t off = 0; off < bytes; off += max_piece) {
      post(off, static_cast<int>(std::min(max_piece, bytes - off)));
    }
  } else if (bytes >= eager_piece && bytes <= split_limit) {
    std::size_t off = 0;
    for (; bytes - off >= eager_piece; off += eager_piece) post(off, static_cast<int>(eager_piece));
    post(off, static_cast<int>(bytes - off));
  } else {
    post(std::size_t{0}, static_cast<int>(bytes));
  }
}

// The pieces a receive of any size up to `capacity` (at most INT_MAX) is ready for: the first
// takes a whole message of up to `capacity` bytes, the others what follows a piece of
// eager_piece bytes, up to the capacity.
template <class Post>
void for_each_receive_piece(std::size_t capacity, Post&& post) {
  post(std::size_t{0}, static_cast<int>(capacity));
  const std::size_t last = std::min(capacity, split_limit);
  for (std::size_t off = eager_piece; off <= last; off += eager_piece) {
    post(off, static_cast<int>(std::min(eager_piece, capacity - off)));
  }
}

// How many pieces of either kind, to reserve them once.
inline std::size_t piece_count(std::size_t bytes) noexcept {
  if (bytes > static_cast<std::size_t>(INT_MAX)) return bytes / max_piece + 1;
  return std::min(bytes, split_limit) / eager_piece + 1;
}

}  // namespace distcomm::detail::mpi_pieces
