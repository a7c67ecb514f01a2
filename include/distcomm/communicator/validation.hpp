// The checks every call passes on the caller's thread before anything is sent: each throws
// invalid_argument_error naming the call, the argument and what it should be. A bad call on one
// rank leaves the transport untouched (communicator/pipeline.hpp never sees it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "distcomm/backend.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm::detail {

// A valid dtype, data for its count, a size that fits, in the memory the backend moves.
inline void check_tensor(const char* what, const tensor_view& t, memory_kind moved,
                         const char* backend) {
  if (!is_valid(t.type)) {
    throw invalid_argument_error(std::string(what) + ": invalid dtype value " +
                                 std::to_string(static_cast<int>(t.type)));
  }
  if (t.data == nullptr && t.count != 0) {
    throw invalid_argument_error(std::string(what) + ": data is null but count is " +
                                 std::to_string(t.count));
  }
  if (t.count > std::numeric_limits<std::size_t>::max() / dtype_size(t.type)) {
    throw invalid_argument_error(std::string(what) + ": " + std::to_string(t.count) +
                                 " elements of " + to_string(t.type) +
                                 " overflow the address space");
  }
  if (t.memory != moved) {
    throw invalid_argument_error(std::string(what) + ": tensor in " + to_string(t.memory) +
                                 " memory, but backend '" + backend + "' moves " +
                                 to_string(moved) + " memory only");
  }
}

inline void check_op(reduce_op op) {
  if (!is_valid(op)) {
    throw invalid_argument_error("invalid reduce_op value " + std::to_string(static_cast<int>(op)));
  }
}

// `in` and `out` must share a dtype,
inline void check_same_type(const char* what, const tensor_view& in, const tensor_view& out) {
  if (in.type != out.type) {
    throw invalid_argument_error(std::string(what) + ": input is " + to_string(in.type) +
                                 " but output is " + to_string(out.type));
  }
}

// ... and have the expected element counts.
inline void check_pair(const char* what, const tensor_view& in, const tensor_view& out,
                       std::size_t in_count, std::size_t out_count) {
  check_same_type(what, in, out);
  if (in.count != in_count) {
    throw invalid_argument_error(std::string(what) + ": input has " + std::to_string(in.count) +
                                 " elements, expected " + std::to_string(in_count));
  }
  if (out.count != out_count) {
    throw invalid_argument_error(std::string(what) + ": output has " + std::to_string(out.count) +
                                 " elements, expected " + std::to_string(out_count));
  }
}

// alltoall(v) reads blocks of `in` while others already land in `out`: no in-place form.
inline void check_disjoint(const char* what, const tensor_view& in, const tensor_view& out) {
  const auto a = reinterpret_cast<std::uintptr_t>(in.data);
  const auto b = reinterpret_cast<std::uintptr_t>(out.data);
  if (a != 0 && b != 0 && in.bytes() != 0 && out.bytes() != 0 && a < b + out.bytes() &&
      b < a + in.bytes()) {
    throw invalid_argument_error(std::string(what) +
                                 ": input and output overlap; it has no in-place form, use "
                                 "another output buffer");
  }
}

inline void check_root(const char* what, int root, int size) {
  if (root < 0 || root >= size) {
    throw invalid_argument_error(std::string(what) + ": root " + std::to_string(root) +
                                 " is not a rank (world size " + std::to_string(size) + ")");
  }
}

// A point-to-point message: a peer other than this rank, a user tag.
inline void check_tag(const char* what, int tag) {
  if (tag < 0 || static_cast<tag_t>(tag) >= user_tag_base) {
    throw invalid_argument_error(std::string(what) + ": tag " + std::to_string(tag) +
                                 " is outside the users' tags, 0 to 2^30 - 1");
  }
}

inline void check_peer(const char* what, int peer, int tag, int rank, int size) {
  if (peer < 0 || peer >= size || peer == rank) {
    throw invalid_argument_error(
        std::string(what) + ": peer " + std::to_string(peer) +
        (peer == rank ? " is this rank (copy the data instead)"
                      : " is not a rank (world size " + std::to_string(size) + ")"));
  }
  check_tag(what, tag);
}

// The displacements of `counts` (one per rank of `size`) in a buffer of `capacity` elements,
// written to `d` (room for `size`): `displs` as given, or the blocks packed in rank order without
// them. Each block must fit.
inline void layout_of(const char* what, const char* side, span<const std::size_t> counts,
                      span<const std::size_t> displs, std::size_t capacity, int size,
                      std::size_t* d) {
  const auto name = [&] { return std::string(what) + ": " + side + (*side ? "_" : ""); };
  const auto p = static_cast<std::size_t>(size);
  if (counts.size() != p) {
    throw invalid_argument_error(name() + "counts has " + std::to_string(counts.size()) +
                                 " entries, expected one per rank (" + std::to_string(p) + ")");
  }
  if (!displs.empty() && displs.size() != p) {
    throw invalid_argument_error(name() + "displs has " + std::to_string(displs.size()) +
                                 " entries, expected none or one per rank (" + std::to_string(p) +
                                 ")");
  }
  std::size_t next = 0;
  for (std::size_t q = 0; q < p; ++q) {
    d[q] = displs.empty() ? next : displs[q];
    if (counts[q] > capacity || d[q] > capacity - counts[q]) {
      throw invalid_argument_error(name() + "counts[" + std::to_string(q) +
                                   "] = " + std::to_string(counts[q]) + " elements at " +
                                   std::to_string(d[q]) + " do not fit in the buffer of " +
                                   std::to_string(capacity) + " elements");
    }
    next = d[q] + counts[q];
  }
}

// count x size, refused where it overflows.
inline std::size_t checked_mul(std::size_t count, int size, const char* what) {
  const auto p = static_cast<std::size_t>(size);
  if (count > std::numeric_limits<std::size_t>::max() / p) {
    throw invalid_argument_error(std::string(what) + ": " + std::to_string(count) + " x " +
                                 std::to_string(p) + " ranks overflows size_t");
  }
  return count * p;
}

}  // namespace distcomm::detail
