// distcomm::autotune::tuner: see include/distcomm/autotune/tuner.hpp.
#include "distcomm/autotune/tuner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "distcomm/core/error.hpp"
#include "distcomm/log.hpp"
#include "distcomm/sim/calibrate.hpp"
#include "distcomm/sim/step.hpp"

namespace distcomm::autotune {

namespace {

using steady = std::chrono::steady_clock;

constexpr double KiB = 1024, MiB = 1024 * 1024;

// What the search may try. Around the defaults, a factor of about 4 apart: a step's time is
// flat over smaller changes, within this machine's noise (docs/SCALING.md, Autotuning).
const std::vector<double> threshold_grid = {1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB};
const std::vector<double> cycle_grid_ms = {0.5, 1, 2.5, 5, 10};
const std::vector<double> cutoff_grid = {64 * KiB, 1 * MiB, 4 * MiB, 0};  // 0: pack every tensor
const std::vector<double> segment_grid = {64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB};
const std::vector<double> table_scales = {1, 4, 0.25, 16, 1.0 / 16};
// A hierarchical communicator's threshold (hierarchical.hpp; its default of 256 KiB was measured
// over 1 Gbit/s links between namespace-hosts).
const std::vector<double> hierarchical_grid = {64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB};

// `grid` with `start` first, then the rest nearest to it first (on a log scale; 0, "none", last).
std::vector<double> around(double start, const std::vector<double>& grid) {
  std::vector<double> out = grid;
  if (std::find(out.begin(), out.end(), start) == out.end()) out.push_back(start);
  const auto distance = [&](double v) {
    if (v == start) return -1.0;
    if (v <= 0 || start <= 0) return std::numeric_limits<double>::infinity();
    return std::fabs(std::log(v / start));
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](double a, double b) { return distance(a) < distance(b); });
  return out;
}

// `grid` ordered by predict(value), lowest first (ties keep the grid's order).
template <class Predict>
std::vector<double> by_model(std::vector<double> grid, Predict&& predict) {
  std::vector<std::pair<double, double>> scored;
  for (double v : grid) scored.emplace_back(predict(v), v);
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < grid.size(); ++i) grid[i] = scored[i].second;
  return grid;
}

enum slot : std::size_t {
  threshold = 0,
  cycle = 1,
  cutoff = 2,
  segment = 3,
  table = 4,
  hierarchy = 5,
  slots = 6
};

}  // namespace

algo_table scaled(const algo_table& t, double scale) {
  constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();
  const auto times = [&](std::size_t b) {
    if (b == 0 || b == unbounded) return b;
    return std::max<std::size_t>(
        1, static_cast<std::size_t>(std::llround(static_cast<double>(b) * scale)));
  };
  std::vector<algo_range> ranges;
  for (algo_range r : t.ranges()) {
    r.lo = times(r.lo);
    r.hi = times(r.hi);
    if (r.lo < r.hi) ranges.push_back(r);
  }
  return algo_table(std::move(ranges));
}

tuner::tuner(any_communicator& comm, any_communicator& control, const config& cfg)
    : comm_(comm), control_(control), cfg_(cfg), cycle_(cfg.cycle_time) {
  if (!cfg.autotune && cfg.autotune_file.empty()) return;
  base_ = comm_.current_tuning();
  has_algo_ = !base_.algo.empty();
  status_.active = cfg.autotune;
  status_.current.backend = comm_.backend_name();
  status_.current.strategy = comm_.strategy_name();
  status_.current.ranks = comm_.size();
  status_.current.settings = base_;
  status_.current.cycle_ms = cycle_.count() * 1000.0;
  phase_ = cfg.autotune ? phase::warming : phase::off;
  if (cfg.autotune_file.empty()) return;

  // Rank 0's file, the same text on every rank: every rank decides alike.
  std::string text;
  std::uint64_t n = 0;
  if (control_.rank() == 0) {
    try {
      if (auto t = read_file(cfg.autotune_file)) text = *t;
    } catch (const invalid_argument_error& e) {
      text = std::string("\0", 1) + e.what();  // told to every rank below
    }
    n = text.size();
  }
  control_.broadcast(tensor_view{&n, 1, dtype::i64}, 0);
  text.resize(static_cast<std::size_t>(n));
  if (n > 0) control_.broadcast(tensor_view{text.data(), text.size(), dtype::u8}, 0);
  if (text.empty()) return;  // no file yet: search (and write it), or nothing
  if (text[0] == '\0') throw invalid_argument_error("DISTCOMM_AUTOTUNE_FILE: " + text.substr(1));
  const choice c = from_json(text, "DISTCOMM_AUTOTUNE_FILE " + cfg.autotune_file);
  const std::string why = c.mismatch(comm_.backend_name(), comm_.strategy_name(), comm_.size());
  if (!why.empty()) {
    if (control_.rank() == 0) {
      log(log_level::warn, "autotune: not using " + cfg.autotune_file + ": " + why +
                               (cfg.autotune ? "; searching anew (and replacing it)" : ""));
    }
    return;
  }
  if (!(c.settings == base_)) {
    if (!comm_.retunable()) {
      throw invalid_argument_error("DISTCOMM_AUTOTUNE_FILE " + cfg.autotune_file + " sets " +
                                   c.describe() + ", but this " + comm_.backend_name() + " " +
                                   comm_.strategy_name() +
                                   " communicator cannot be retuned; delete the file");
    }
    comm_.retune(c.settings);
  }
  cycle_ = std::chrono::duration<double>(c.cycle_ms / 1000.0);
  phase_ = phase::done;
  std::lock_guard<std::mutex> lock(mutex_);
  status_.active = status_.done = status_.loaded = true;
  status_.current = c;
  if (control_.rank() == 0) {
    log(log_level::info, "autotune: using " + c.describe() + " from " + cfg.autotune_file);
  }
}

std::chrono::duration<double> tuner::after_cycle(const std::vector<int>& allreduces,
                                                 const std::vector<batch>& batches,
                                                 const std::vector<handed>& tensors) {
  if (!searching() || allreduces.empty()) return cycle_;
  if (marker_ < 0) {
    // A step's first tensor: the first allreduce run a second time (a one-off, such as an
    // average at start-up, never is). Every rank runs the same entries, so picks the same.
    for (int i : allreduces) {
      if (std::find(seen_.begin(), seen_.end(), i) != seen_.end()) {
        marker_ = i;
        break;
      }
    }
    if (marker_ < 0) {
      seen_.insert(seen_.end(), allreduces.begin(), allreduces.end());
      return cycle_;
    }
    seen_.clear();
  }
  if (phase_ == phase::fitting) {
    batches_.insert(batches_.end(), batches.begin(), batches.end());
    handed_.insert(handed_.end(), tensors.begin(), tensors.end());
  }
  if (std::find(allreduces.begin(), allreduces.end(), marker_) == allreduces.end()) return cycle_;
  const steady::time_point now = steady::now();
  ++steps_seen_;
  switch (phase_) {
    case phase::warming:  // the marker's second run, then one ordinary step
      if (steps_seen_ == 2) {
        phase_ = phase::fitting;
        steps_seen_ = 0;
      }
      break;
    case phase::fitting:
      start_search();
      break;
    case phase::settling:
      phase_ = phase::measuring;
      steps_seen_ = 0;
      since_ = now;
      break;
    case phase::measuring: {
      if (steps_seen_ < cfg_.autotune_steps) break;
      // The slowest rank's time: the same number on every rank, so the same next move.
      double seconds = std::chrono::duration<double>(now - since_).count();
      control_.allreduce(tensor_view{&seconds, 1, dtype::f64}, reduce_op::max);
      search_->record(seconds / cfg_.autotune_steps);
      choice measured;  // what was measured, for the log
      std::size_t candidate = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        status_.trials = search_->trials();
        measured = status_.current;
        candidate = status_.trials.size();
      }
      if (control_.rank() == 0 && log_enabled(log_level::debug)) {
        log(log_level::debug,
            "autotune: candidate " + std::to_string(candidate) + ": " + measured.describe() + ": " +
                std::to_string(seconds / cfg_.autotune_steps * 1000.0) + " ms per step");
      }
      if (search_->done()) {
        finish();
      } else {
        apply(search_->point());
      }
      break;
    }
    case phase::off:
    case phase::done:
      break;
  }
  return cycle_;
}

void tuner::start_search() {
  // The model's machine from this step's collectives, its backward from this rank's hand-overs.
  const int p = comm_.size();
  std::optional<sim::machine> m;
  if (p > 1) {
    std::vector<sim::sample> samples;
    for (const batch& b : batches_) {
      if (b.bytes > 0 && b.seconds > 0)
        samples.push_back({sim::algorithm::ring, p, b.bytes, b.seconds});
    }
    sim::calibrate_options folded;
    folded.gamma = 0.0;  // gamma folded into beta
    try {
      m = sim::calibrate(samples, folded).fitted;
    } catch (const invalid_argument_error&) {
      // One size only, or too few: no model; the grids keep their own order.
    }
  }
  std::sort(handed_.begin(), handed_.end(),
            [](const handed& a, const handed& b) { return a.at < b.at; });
  std::vector<sim::layer> layers;
  for (std::size_t i = 0; i < handed_.size(); ++i) {
    const double gap =
        i == 0 ? 0 : std::chrono::duration<double>(handed_[i].at - handed_[i - 1].at).count();
    layers.push_back({handed_[i].bytes, gap});
  }
  const double cycle_ms = cycle_.count() * 1000.0;
  std::vector<double> thresholds =
      around(static_cast<double>(base_.fusion_threshold), threshold_grid);
  std::vector<double> cycles = around(cycle_ms, cycle_grid_ms);
  if (m && !layers.empty()) {
    sim::step_options o;
    o.ranks = p;
    o.cycle_seconds = cycle_.count();
    thresholds = by_model(thresholds, [&](double t) {
      o.fusion_threshold = static_cast<std::size_t>(t);
      return sim::simulate_step(*m, layers, o).step_seconds;
    });
    o.fusion_threshold = static_cast<std::size_t>(thresholds.front());
    cycles = by_model(cycles, [&](double ms) {
      o.cycle_seconds = ms / 1000.0;
      return sim::simulate_step(*m, layers, o).step_seconds;
    });
  }
  // The configured values are measured first, and the choice must beat them (search.hpp's
  // confirmation): the model only orders what is tried after them. Started from the model's pick
  // instead, a job whose model was wrong ended slower than its defaults (docs/SCALING.md,
  // Autotuning, has the measurement).
  const std::vector<double> picked = {thresholds.front(), cycles.front()};
  const auto configured_first = [](std::vector<double>& values, double configured) {
    const auto at = std::find(values.begin(), values.end(), configured);
    std::rotate(values.begin(), at, at + 1);
  };
  configured_first(thresholds, static_cast<double>(base_.fusion_threshold));
  configured_first(cycles, cycle_ms);
  // Rank 0's order for every rank: the ranks' own timings differ a little, their search must not.
  std::vector<double> order = thresholds;
  order.insert(order.end(), cycles.begin(), cycles.end());
  control_.broadcast(tensor_view{order.data(), order.size(), dtype::f64}, 0);
  std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(thresholds.size()),
            thresholds.begin());
  std::copy(order.begin() + static_cast<std::ptrdiff_t>(thresholds.size()), order.end(),
            cycles.begin());
  std::vector<parameter> params(slots);
  params[threshold] = {"fusion_threshold", thresholds};
  params[cycle] = {"cycle_ms", cycles};
  params[cutoff] = {"fusion_cutoff", around(static_cast<double>(base_.fusion_cutoff), cutoff_grid)};
  params[segment] = {"segment_bytes",
                     around(static_cast<double>(base_.segment_bytes), segment_grid)};
  params[table] = {"table_scale", table_scales};
  // 0: not a hierarchical communicator, nothing to try.
  const auto across = static_cast<double>(base_.hierarchical_threshold);
  params[hierarchy] = {"hierarchical_threshold",
                       across > 0 ? around(across, hierarchical_grid) : std::vector<double>{0}};
  if (!comm_.retunable()) {
    for (std::size_t i : {threshold, cutoff, segment, table, hierarchy}) {
      params[i].values.resize(1);  // only the engine's own cycle can change
    }
  }
  // A table without a size where it switches (native:0-max) has nothing to move.
  const bool switches = has_algo_ && base_.algo.ranges().size() > 1;
  if (!switches) params[table].values.resize(1);
  search_ = std::make_unique<search>(std::move(params));
  batches_.clear();
  handed_.clear();
  if (control_.rank() == 0) {
    std::ostringstream os;
    os << "autotune: searching from the settings given (fusion threshold "
       << format_bytes(static_cast<std::size_t>(thresholds.front())) << ", cycle " << cycles.front()
       << " ms), ";
    if (m) {
      os << "trying the model's pick for this job's tensors and timings first (fusion threshold "
         << format_bytes(static_cast<std::size_t>(picked[0])) << ", cycle " << picked[1]
         << " ms), ";
    } else {
      os << "no model, ";
    }
    os << cfg_.autotune_steps << " steps per candidate";
    log(log_level::info, os.str());
  }
  apply(search_->point());
}

void tuner::apply(const std::vector<double>& point) {
  tuning t = base_;
  t.fusion_threshold = static_cast<std::size_t>(point[threshold]);
  t.fusion_cutoff = static_cast<std::size_t>(point[cutoff]);
  t.segment_bytes = static_cast<std::size_t>(point[segment]);
  if (has_algo_) t.algo = scaled(base_.algo, point[table]);
  t.hierarchical_threshold = static_cast<std::size_t>(point[hierarchy]);
  if (comm_.retunable() && !(t == comm_.current_tuning())) comm_.retune(t);
  cycle_ = std::chrono::duration<double>(point[cycle] / 1000.0);
  phase_ = phase::settling;
  steps_seen_ = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  status_.current.settings = t;
  status_.current.cycle_ms = point[cycle];
}

void tuner::finish() {
  apply(search_->best());
  phase_ = phase::done;
  choice c;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_.done = true;
    status_.current.step_seconds = search_->best_seconds();
    status_.current.start_seconds = search_->start_seconds();
    status_.current.trials = static_cast<int>(search_->trials().size());
    c = status_.current;
  }
  if (control_.rank() != 0) return;
  std::ostringstream os;
  os.precision(4);
  os << "autotune: chose " << c.describe() << ": " << c.step_seconds * 1000.0
     << " ms per step against " << c.start_seconds * 1000.0 << " ms at the start (" << c.trials
     << " candidates, " << cfg_.autotune_steps << " steps each)";
  log(log_level::info, os.str());
  if (!cfg_.autotune_file.empty()) {
    try {
      save(c, cfg_.autotune_file);
    } catch (const error& e) {
      log(log_level::warn, std::string("autotune: ") + e.what());
    }
  }
}

status tuner::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

}  // namespace distcomm::autotune
