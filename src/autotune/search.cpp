// distcomm::autotune::search: see include/distcomm/autotune/search.hpp.
#include "distcomm/autotune/search.hpp"

#include <cmath>
#include <utility>

#include "distcomm/core/error.hpp"

namespace distcomm::autotune {

search::search(std::vector<parameter> params, double min_gain, int patience)
    : params_(std::move(params)), min_gain_(min_gain), patience_(patience) {
  if (params_.empty()) throw invalid_argument_error("autotune: a search needs a parameter");
  if (!(min_gain_ >= 0 && min_gain_ < 1) || patience_ < 1) {
    throw invalid_argument_error("autotune: min_gain must be in [0, 1) and patience at least 1");
  }
  for (const parameter& p : params_) {
    if (p.values.empty()) {
      throw invalid_argument_error("autotune: parameter '" + p.name + "' has no values");
    }
    best_.push_back(p.values.front());
  }
  point_ = best_;
}

void search::record(double seconds) {
  if (done_) throw invalid_argument_error("autotune: the search has ended");
  if (!std::isfinite(seconds) || seconds < 0) {
    throw invalid_argument_error("autotune: a measurement must be a finite time, not " +
                                 std::to_string(seconds));
  }
  trials_.push_back({point_, seconds});
  if (confirming_ == 1) {
    start_again_ = seconds;
    confirming_ = 2;
    point_ = best_;
    return;
  }
  if (confirming_ == 2) {
    const trial& start = trials_.front();
    if (best_seconds_ + seconds < (start.seconds + start_again_) * (1 - min_gain_)) {
      best_seconds_ = (best_seconds_ + seconds) / 2;
    } else {
      best_ = start.point;
      best_seconds_ = (start.seconds + start_again_) / 2;
    }
    done_ = true;
    point_ = best_;
    return;
  }
  if (!started_) {
    started_ = true;
    best_seconds_ = seconds;
  } else if (seconds < best_seconds_ * (1 - min_gain_)) {
    best_[param_] = point_[param_];
    best_seconds_ = seconds;
    misses_ = 0;
  } else {
    ++misses_;
  }
  advance();
}

double search::start_seconds() const noexcept {
  if (trials_.empty()) return 0;
  const double first = trials_.front().seconds;
  return confirming_ == 2 ? (first + start_again_) / 2 : first;  // 2: measured again
}

void search::advance() {
  while (param_ < params_.size()) {
    const std::vector<double>& values = params_[param_].values;
    ++value_;
    if (misses_ >= patience_ || value_ >= values.size()) {
      ++param_;
      value_ = 0;
      misses_ = 0;
      continue;
    }
    if (values[value_] == best_[param_]) continue;  // measured already
    point_ = best_;
    point_[param_] = values[value_];
    return;
  }
  if (best_ != trials_.front().point) {  // measure the start and the best once more
    confirming_ = 1;
    point_ = trials_.front().point;
    return;
  }
  done_ = true;
  point_ = best_;
}

}  // namespace distcomm::autotune
