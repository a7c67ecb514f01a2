// Data for the correctness check of the benchmarks (-c): every rank fills its input with small
// integers whose reduction is exact in every dtype and in any order (so the expected result does
// not depend on the strategy), and counts the elements of its result that differ from it.
// Elements are addressed by their index in the collective's full buffer, so one rank can fill or
// check any slice of it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "options.hpp"

namespace distcomm::bench {

class data_check {
 public:
  // block: elements per rank of allgather (rank q's input lands at q*block) and per peer of
  // alltoall; ignored otherwise.
  data_check(collective c, dtype t, reduce_op op, int ranks, int rank, int root,
             std::size_t block = 0);

  // This rank's input elements first .. first+count-1 into buf.
  void fill_input(void* buf, std::size_t first, std::size_t count) const;
  // A value no correct result holds there, so an untouched output is caught.
  void fill_sentinel(void* buf, std::size_t count) const;
  // Elements of buf, holding result elements first .. first+count-1, that are wrong.
  std::int64_t wrong(const void* buf, std::size_t first, std::size_t count) const;
  dtype type() const noexcept { return type_; }

 private:
  collective coll_;
  dtype type_;
  reduce_op op_;
  int ranks_;
  int rank_;
  int root_;
  std::size_t block_;
};

}  // namespace distcomm::bench
