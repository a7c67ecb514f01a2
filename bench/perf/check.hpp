// Data for the correctness check of the benchmarks (-c): every rank fills its input with small
// integers whose reduction is exact in every dtype and in any order (so the expected result does
// not depend on the strategy), and counts the elements of its result that differ from it.
// Elements are addressed by their index in the collective's full buffer, so one rank can fill or
// check any slice of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "options.hpp"

namespace distcomm::bench {

class data_check {
 public:
  // block: elements per rank of allgather (rank q's input lands at q*block) and per peer of
  // alltoall (and what this rank receives from each peer in alltoallv); ignored otherwise.
  // from: where this rank's block starts in every sender's input under alltoallv (alltoall:
  // rank * block, the default).
  data_check(collective c, dtype t, reduce_op op, int ranks, int rank, int root,
             std::size_t block = 0, std::size_t from = static_cast<std::size_t>(-1));

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
  std::size_t from_;
};

// --collective alltoallv's skewed distribution: every rank sends rank q a block of
// mean * 2(q+1)/(p+1) elements (rounded down), so rank p-1 receives about twice the mean and rank
// 0 about 2/(p+1) of it, as the most and least popular experts of a mixture of experts. A rank
// sends at most mean * p elements; rank p-1 receives up to 2p/(p+1) times that.
std::vector<std::size_t> skewed_counts(std::size_t mean, int ranks);

}  // namespace distcomm::bench
