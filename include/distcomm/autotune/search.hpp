// The autotuner's search (autotune/tuner.hpp): one setting at a time, each over a list of values,
// keeping a value only when it is clearly faster. Deterministic: the same measurements give the
// same points on every rank, so ranks that agree on each measurement agree on every choice.
//   search s({{"fusion_threshold", {64 << 20, 16 << 20, 4 << 20}}, {"cycle_ms", {1, 2.5, 5}}});
//   while (!s.done()) s.record(seconds_per_step_at(s.point()));
//   use(s.best());
// The first measurement is of every setting's first value (the starting point: the engine's are
// the settings given). Then each setting in turn tries its other values in the order given,
// the others at their best so far; a value replaces the best when it is faster by more than
// `min_gain` (a fraction: noise does not move the choice), and a setting stops after `patience`
// values in a row that did not, so a list ordered by a prediction stops early. Last, when the best
// is not the starting point, both are measured once more (the start first): the best stays only
// when its two measurements together beat the start's by more than `min_gain`, so one lucky
// measurement does not make the choice.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "distcomm/autotune/choice.hpp"

namespace distcomm::autotune {

struct parameter {
  std::string name;
  std::vector<double> values;  // in the order to try them; values[0]: the starting point
};

class search {
 public:
  // invalid_argument_error for no parameters, one without values, min_gain outside [0, 1) or
  // patience below 1.
  explicit search(std::vector<parameter> params, double min_gain = 0.03, int patience = 2);

  bool done() const noexcept { return done_; }
  // The values to measure next, one per parameter; once done, the best.
  const std::vector<double>& point() const noexcept { return done_ ? best_ : point_; }
  // The measurement of point(): lower is better (seconds per step). invalid_argument_error once
  // done, or for a negative or non-finite time.
  void record(double seconds);

  const std::vector<double>& best() const noexcept { return best_; }
  double best_seconds() const noexcept { return best_seconds_; }
  // The starting point's time: the mean of its measurements (two when the best was confirmed).
  double start_seconds() const noexcept;
  const std::vector<trial>& trials() const noexcept { return trials_; }
  const std::vector<parameter>& parameters() const noexcept { return params_; }

 private:
  void advance();

  std::vector<parameter> params_;
  double min_gain_;
  int patience_;
  std::vector<double> best_, point_;
  double best_seconds_ = 0;
  std::vector<trial> trials_;
  std::size_t param_ = 0;  // the setting being tried
  std::size_t value_ = 0;  // its value under trial
  int misses_ = 0;         // values in a row that did not beat the best
  bool started_ = false;   // the starting point is measured
  int confirming_ = 0;     // 1: measuring the start again, 2: the best again
  double start_again_ = 0;
  bool done_ = false;
};

}  // namespace distcomm::autotune
