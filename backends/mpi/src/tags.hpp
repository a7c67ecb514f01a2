// The MPI tag a DistComm tag travels as. MPI guarantees tags only up to 32767; a library reports
// its own bound as the attribute MPI_TAG_UB (Open MPI's is 2^31 - 1), which the backend queries
// for each communicator. DistComm's tags are two ranges (backend.hpp): the collectives' own, small
// numbers below user_tag_base, and users' point-to-point tags, user_tag_base (2^30) + the tag the
// caller gave, up to 2^31 - 1.
//  * MPI_TAG_UB reaches 2^31 - 1: every tag travels as it is.
//  * Else the MPI tags are split: 0 .. own_tag_span - 1 for DistComm's own (as they are), and
//    own_tag_span .. MPI_TAG_UB for users' (own_tag_span + the caller's tag).
// Every rank of a communicator sees the same MPI_TAG_UB, so every rank maps alike, and the mapping
// is one-to-one. A tag outside its range is refused before anything is posted.
#pragma once

#include <string>

#include "distcomm/backend.hpp"
#include "distcomm/check/agree.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/strategy/detail.hpp"

namespace distcomm::detail {

// MPI tags kept for DistComm's own when MPI_TAG_UB is below the largest tag DistComm produces:
// room for every phase tag (below 32) and for callers of the backend itself (the backend suite
// uses tags up to a few hundred), leaving 31,744 user tags under the standard's 32767.
inline constexpr tag_t own_tag_span = 1024;
static_assert(strategy::detail::tag_allgatherv < own_tag_span && check::tag_agree < own_tag_span,
              "a collective's tag would not fit the MPI tags kept for DistComm's own");

// The largest tag DistComm produces: user_tag_base + the largest tag a caller may give.
inline constexpr tag_t largest_tag = user_tag_base + (user_tag_base - 1);

// The largest tag a caller of communicator::send / recv / sendrecv can use on a communicator whose
// MPI_TAG_UB is `tag_ub` (at least 32767, as the standard requires).
inline tag_t largest_user_tag(int tag_ub) {
  const auto ub = static_cast<tag_t>(tag_ub);
  return ub - own_tag_span < user_tag_base - 1 ? ub - own_tag_span : user_tag_base - 1;
}

// `tag` as MPI sends and matches it on a communicator whose MPI_TAG_UB is `tag_ub`.
// Throws invalid_argument_error for a tag outside its range.
inline int mpi_tag(tag_t tag, int tag_ub) {
  const auto ub = static_cast<tag_t>(tag_ub);
  // Built only for an error: every message of every collective comes through here.
  const auto reported = [tag_ub] {
    return "this MPI library reports MPI_TAG_UB " + std::to_string(tag_ub) +
           " for the communicator";
  };
  if (ub >= largest_tag) {
    if (tag <= ub) return static_cast<int>(tag);
    throw invalid_argument_error("mpi: tag " + std::to_string(tag) + " is above MPI_TAG_UB (" +
                                 reported() + "); use a tag below user_tag_base (2^30)");
  }
  if (tag < user_tag_base) {
    if (tag < own_tag_span) return static_cast<int>(tag);
    throw invalid_argument_error("mpi: tag " + std::to_string(tag) +
                                 " of a collective or a direct backend call is not below " +
                                 std::to_string(own_tag_span) + ", the tags kept for them when " +
                                 reported() + "; use a tag below " + std::to_string(own_tag_span));
  }
  const tag_t user = tag - user_tag_base;
  if (user <= largest_user_tag(tag_ub)) return static_cast<int>(own_tag_span + user);
  throw invalid_argument_error(
      "mpi: user tag " + std::to_string(user) + " cannot be sent on this communicator: " +
      reported() + ", which leaves user tags 0 to " + std::to_string(largest_user_tag(tag_ub)) +
      " (send, recv, sendrecv and their i- forms); use a tag in that range");
}

}  // namespace distcomm::detail
