// strategy::hierarchical: allreduces of at least a threshold go over the two levels of a job
// across hosts (inside each host, then across hosts: `levels`, which init/'s distcomm::hierarchical
// implements over two communicators); smaller ones, and every other collective, are the flat
// strategy's (Flat, automatic by default) over the whole job's backend. It is a strategy of the
// one communicator, so validation, the call check (a grouped call's per-tensor fingerprint
// included), Tensor Fusion's threshold and cutoff and reduce_op::avg's rounding are the flat
// path's own. Without levels (a sub-communicator, a survivor of shrink) it is Flat.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "distcomm/backend.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/identity.hpp"

namespace distcomm {

// The two levels of a hierarchical job, as the strategy sees them.
class levels {
 public:
  virtual ~levels() = default;
  // data = the reduction by `op` (sum, min, max or prod; never avg) of every rank's data, in
  // place, within `until`.
  virtual void allreduce(void* data, std::size_t count, dtype t, reduce_op op, deadline until) = 0;
  // Ranks in the whole job (the divisor of avg).
  virtual int size() const = 0;
  // The backends of the levels, "shm+gloo": the communicator's backend_name().
  virtual const std::string& name() const = 0;
  // The flat communicator's settings moved from `was` to `now` (communicator::retune): the levels
  // follow where they should (the level across hosts keeps its own table).
  virtual void retune(const config& was, const config& now) = 0;
  // Every rank's `threshold`, agreed through the levels: returned when all asked the same,
  // mismatch_error naming the range on every rank otherwise. Collective over the job.
  virtual std::size_t agree(std::size_t threshold) = 0;
};

namespace strategy {

template <class Flat = automatic>
class hierarchical : public Flat {
 public:
  static constexpr algorithm id = algorithm::hierarchical;
  static constexpr const char* name = class_name_of(id);
  // The levels write into the caller's buffer directly: the agreement comes first.
  static constexpr bool overlaps_agreement = false;

  // Flat alone: no levels.
  explicit hierarchical(const config& c) : Flat(c), cfg_(c) {}
  // Allreduces of at least `threshold` bytes over `over`.
  hierarchical(const config& c, std::shared_ptr<levels> over, std::size_t threshold)
      : Flat(c), cfg_(c), levels_(std::move(over)), threshold_(threshold) {}

  template <class B>
  void allreduce(B& b, const void* in, void* out, std::size_t count, dtype t, reduce_op op,
                 deadline until) {
    const std::size_t bytes = count * dtype_size(t);
    if constexpr (distcomm::detail::moves_device_memory<B>::value) {
      Flat::allreduce(b, in, out, count, t, op, until);  // the levels move host memory
    } else {
      if (!levels_ || bytes < threshold_) {
        Flat::allreduce(b, in, out, count, t, op, until);
        return;
      }
      if (in != out) std::memcpy(out, in, bytes);
      // avg as the flat strategies finish it: the sum, divided once by the job's ranks.
      const bool avg = op == reduce_op::avg;
      levels_->allreduce(out, count, t, avg ? reduce_op::sum : op, until);
      if (avg) divide(out, out, count, t, static_cast<std::size_t>(levels_->size()));
    }
  }

  // Part of the settings every rank must share: the threshold, and whether there are levels.
  std::string identity() const {
    return std::string(name) + "/" + (levels_ ? std::to_string(threshold_) : "flat") + "/" +
           Flat::name;
  }
  // communicator::retune: Flat anew from `c`, the same levels (following the flat settings'
  // move) and t's threshold unless it is 0, agreed by every rank first (mismatch_error, the
  // strategy unchanged, when they asked for different ones).
  hierarchical retuned(const config& c, const tuning& t) const {
    if (!levels_) return hierarchical(c);
    const std::size_t asked = t.hierarchical_threshold != 0 ? t.hierarchical_threshold : threshold_;
    const std::size_t agreed = levels_->agree(asked);
    levels_->retune(cfg_, c);
    return hierarchical(c, levels_, agreed);
  }
  void describe(tuning& t) const { t.hierarchical_threshold = levels_ ? threshold_ : 0; }

  // "shm+gloo" over levels, else nullptr (the backend's own name).
  const char* backend_name() const noexcept { return levels_ ? levels_->name().c_str() : nullptr; }
  std::size_t threshold() const noexcept { return threshold_; }
  const std::shared_ptr<levels>& over() const noexcept { return levels_; }

 private:
  config cfg_;  // what the levels last followed
  std::shared_ptr<levels> levels_;
  std::size_t threshold_ = 0;
};

}  // namespace strategy
}  // namespace distcomm
