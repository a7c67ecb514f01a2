// The per-size algorithm table of strategy::automatic, and its text form (DISTCOMM_ALGO), in the
// style of oneCCL's CCL_ALLREDUCE: `tree:0-64K;ring:64K-max`. Ranges are byte sizes of the whole
// buffer, half-open [lo, hi); K, M, G are binary multiples (KiB, MiB, GiB); `max` is unbounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "distcomm/strategy/identity.hpp"

namespace distcomm {

// "rd": name_of(a) (strategy/identity.hpp).
const char* to_string(algorithm a) noexcept;
// Whether a table may name `a`: every algorithm but automatic (the table's user) and
// hierarchical (a job's communicator, not a per-size choice).
bool in_tables(algorithm a) noexcept;

struct algo_range {
  algorithm algo = algorithm::ring;
  std::size_t lo = 0;                                        // inclusive, bytes
  std::size_t hi = std::numeric_limits<std::size_t>::max();  // exclusive, bytes; max = unbounded
};

class algo_table {
 public:
  algo_table() = default;
  explicit algo_table(std::vector<algo_range> ranges);  // validated: sorted, non-overlapping

  // Parses `name:lo-hi;name:lo-hi...`; names (strategy/identity.hpp): ring, tree, ps (or
  // parameter_server), native, rd (or recursive_doubling).
  // Throws invalid_argument_error quoting `source` (e.g. "DISTCOMM_ALGO") and the bad part.
  static algo_table parse(const std::string& text, const std::string& source);

  // The algorithm for a buffer of `bytes`, or `fallback` when no range covers it.
  algorithm pick(std::size_t bytes, algorithm fallback) const noexcept;

  const std::vector<algo_range>& ranges() const noexcept { return ranges_; }
  bool empty() const noexcept { return ranges_.empty(); }
  bool uses(algorithm a) const noexcept;
  std::string to_string() const;

 private:
  std::vector<algo_range> ranges_;
};

// Parses a byte size such as `4096`, `64K`, `1M`, `2G` (also `KiB`/`KB`, case-insensitive) or
// `max`. Throws invalid_argument_error naming `source` when the text is not a size.
std::size_t parse_bytes(const std::string& text, const std::string& source);

// The inverse of parse_bytes: `64K`, `1M`, `4097`, `max` (SIZE_MAX).
std::string format_bytes(std::size_t bytes);

}  // namespace distcomm
