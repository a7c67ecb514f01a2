// The engine's autotuner (DISTCOMM_AUTOTUNE=1, DISTCOMM_AUTOTUNE_FILE): during the first steps of
// a job it tries fusion thresholds, cycle times, fusion cut-offs, segment sizes, strategy cut-offs
// and a hierarchical communicator's threshold, keeps the fastest and logs it; every rank uses the
// same settings from the same collective on.
//
// A step is what the engine sees between two runs of the job's first allreduced tensor (the
// first one run a second time): every rank runs the same collectives in the same order, so every
// rank counts the same steps. After two steps of warm-up, a third is looked at closely:
// its collectives' sizes and times fit the cost model's alpha and beta (sim/calibrate.hpp), and
// the times at which rank 0's gradients were handed over give its backward. The model then
// orders the fusion thresholds and cycle times to try (sim/step.hpp), its best first after the
// settings given, which are the starting point: a choice must beat them (rank 0's order, sent to
// every rank). The search (search.hpp) runs each
// candidate for one step to settle and DISTCOMM_AUTOTUNE_STEPS steps measured; the ranks agree on
// the time (the slowest rank's), so every rank records the same number and makes the same next
// move. Settings change on the engine's thread between two cycles (communicator::retune), in the
// same place on every rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "distcomm/any_communicator.hpp"
#include "distcomm/autotune/choice.hpp"
#include "distcomm/autotune/search.hpp"
#include "distcomm/config.hpp"

namespace distcomm::autotune {

// One collective the engine ran for allreduces, and how long it took here.
struct batch {
  std::size_t bytes = 0;
  double seconds = 0;
};
// One of this rank's allreduced tensors, and when it was handed to the engine.
struct handed {
  std::size_t bytes = 0;
  std::chrono::steady_clock::time_point at;
};

class tuner {
 public:
  // Collective: every rank, as the engine starts. With cfg.autotune_file set, rank 0 reads it
  // and every rank parses the same text (received over `control`): a choice made for this job is
  // applied at once and nothing is searched; invalid_argument_error on every rank for a file that
  // is not a choice.
  tuner(any_communicator& comm, any_communicator& control, const config& cfg);

  // Whether the engine should pass batches and handed tensors to after_cycle() (only in the
  // step the model is fitted to).
  bool wants_detail() const noexcept { return phase_ == phase::fitting; }
  // Whether after_cycle() still has anything to do (searching, not done or off).
  bool searching() const noexcept { return phase_ != phase::off && phase_ != phase::done; }
  // On the engine's thread after a cycle ran collectives: `allreduces` the cache entries of the
  // allreduces it ran, in order. Collective on `control` when a measurement ends (the same cycle
  // on every rank). Returns the cycle time to use from now on.
  std::chrono::duration<double> after_cycle(const std::vector<int>& allreduces,
                                            const std::vector<batch>& batches,
                                            const std::vector<handed>& tensors);
  std::chrono::duration<double> cycle_time() const noexcept { return cycle_; }
  status state() const;

 private:
  enum class phase { off, warming, fitting, settling, measuring, done };

  void start_search();
  void apply(const std::vector<double>& point);
  void finish();

  any_communicator& comm_;
  any_communicator& control_;
  config cfg_;
  phase phase_ = phase::off;
  std::chrono::duration<double> cycle_;
  tuning base_;            // the settings the job started with
  std::vector<int> seen_;  // allreduces run before the marker is known
  int marker_ = -1;        // the cache entry that starts a step
  int steps_seen_ = 0;     // runs of the marker in the current phase
  std::chrono::steady_clock::time_point since_;
  std::vector<batch> batches_;
  std::vector<handed> handed_;
  std::unique_ptr<search> search_;
  bool has_algo_ = false;
  mutable std::mutex mutex_;  // guards status_ (read by other threads)
  status status_;
};

// The table `t` with every finite boundary multiplied by `scale`: how the search moves the
// strategy cut-offs (rd:0-16K;ring:16K-max at 4 is rd:0-64K;ring:64K-max).
algo_table scaled(const algo_table& t, double scale);

}  // namespace distcomm::autotune
