// Who belongs to a sub-communicator: the arithmetic of split() and subset() (communicator.hpp),
// shared by the backends' own split(). Not part of the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "distcomm/core/error.hpp"

namespace distcomm::detail {

// MPI_Comm_split's rule: the ranks whose color is `colors[me]` (none when it is negative), in
// the order of their keys, ties broken by their rank. colors and keys: one per rank.
inline std::vector<int> split_members(const std::vector<std::int64_t>& colors,
                                      const std::vector<std::int64_t>& keys, int me) {
  std::vector<int> members;
  const std::int64_t color = colors[static_cast<std::size_t>(me)];
  if (color < 0) return members;
  for (std::size_t r = 0; r < colors.size(); ++r) {
    if (colors[r] == color) members.push_back(static_cast<int>(r));
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return keys[static_cast<std::size_t>(a)] < keys[static_cast<std::size_t>(b)];
  });
  return members;
}

// This rank's place among `members` (its rank in the sub-communicator).
inline int position_in(const std::vector<int>& members, int rank, const char* backend) {
  const auto it = std::find(members.begin(), members.end(), rank);
  if (it == members.end()) {
    throw invalid_argument_error(std::string(backend) + ": split: rank " + std::to_string(rank) +
                                 " is not among the members it was given");
  }
  return static_cast<int>(it - members.begin());
}

}  // namespace distcomm::detail
