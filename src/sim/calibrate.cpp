#include "distcomm/sim/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "distcomm/core/error.hpp"

namespace distcomm::sim {

namespace {

// alpha, beta, gamma, oversubscribed alpha, cached beta, call alpha, rendezvous alpha
constexpr std::size_t unknowns = 7;
constexpr std::size_t call = 5, rendezvous = 6;     // fitted only when asked for
using coefficients = std::array<double, unknowns>;  // seconds per unit of each

// The model's time for `s` on one node of `node` ranks, `cores` cores and `cache` bytes of cache,
// with one unknown 1.
coefficients coefficients_of(const sample& s, int node, int cores, std::size_t cache,
                             std::size_t eager, double one_way) {
  coefficients c{};
  for (std::size_t i = 0; i < unknowns; ++i) {
    machine unit;
    unit.inter = unit.intra = link{i == 0 ? 1.0 : 0.0, i == 1 ? 1.0 : 0.0};
    unit.gamma = i == 2 ? 1.0 : 0.0;
    unit.oversubscribed_alpha = i == 3 ? 1.0 : 0.0;
    unit.cached_beta = i == 4 ? 1.0 : 0.0;
    unit.call_alpha = i == call ? 1.0 : 0.0;
    unit.rendezvous_alpha = i == rendezvous ? 1.0 : 0.0;
    unit.eager_bytes = eager;
    unit.cache_bytes = cache;
    unit.ranks_per_node = node;
    unit.cores_per_node = cores;
    unit.one_way = one_way;
    c[i] = allreduce_seconds(s.algo, unit, s.bytes, s.ranks, s.ps_servers);
  }
  return c;
}

// Least squares of sum_k ((c_k . x) / t_k - 1)^2 over the unknowns marked free (the others 0 or
// fixed); false when the normal equations are singular.
bool solve(const std::vector<coefficients>& c, const std::vector<double>& t,
           const std::array<bool, unknowns>& free, const coefficients& fixed, coefficients& x) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < unknowns; ++i) {
    if (free[i]) idx.push_back(i);
  }
  const std::size_t n = idx.size();
  double a[unknowns][unknowns + 1] = {};
  for (std::size_t k = 0; k < c.size(); ++k) {
    // Row k scaled by 1/t_k; the right side 1 minus what the fixed unknowns give.
    double rhs = 1.0;
    for (std::size_t i = 0; i < unknowns; ++i) {
      if (!free[i]) rhs -= c[k][i] * fixed[i] / t[k];
    }
    for (std::size_t r = 0; r < n; ++r) {
      const double cr = c[k][idx[r]] / t[k];
      for (std::size_t q = 0; q < n; ++q) a[r][q] += cr * c[k][idx[q]] / t[k];
      a[r][n] += cr * rhs;
    }
  }
  // Each unknown scaled to a unit diagonal (they differ by orders of magnitude: seconds per
  // message against seconds per byte), then Gaussian elimination with partial pivoting; a pivot
  // that vanishes next to 1 means samples that do not tell the unknowns apart.
  coefficients scale{};
  for (std::size_t r = 0; r < n; ++r) {
    if (a[r][r] <= 0) return false;
    scale[r] = 1 / std::sqrt(a[r][r]);
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t q = 0; q < n; ++q) a[r][q] *= scale[r] * scale[q];
    a[r][n] *= scale[r];
  }
  for (std::size_t col = 0; col < n; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < n; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    if (std::fabs(a[pivot][col]) < 1e-9) return false;
    for (std::size_t q = 0; q <= n; ++q) std::swap(a[col][q], a[pivot][q]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t q = col; q <= n; ++q) a[r][q] -= f * a[col][q];
    }
  }
  x = fixed;
  for (std::size_t r = 0; r < n; ++r) {
    x[idx[r]] = a[r][n] / a[r][r] * scale[r];
    if (!std::isfinite(x[idx[r]])) return false;
  }
  return true;
}

// The linear fit at one one-way factor: the unknowns and how far each sample is from them.
struct linear_fit {
  coefficients x{};
  std::vector<double> errors;  // signed predicted / measured - 1, one per sample
  double objective = 0;        // their sum of squares
};

linear_fit fit_at(const std::vector<sample>& samples, int node, const calibrate_options& o,
                  std::size_t cache_bytes, bool oversubscribed, double one_way) {
  linear_fit f;
  std::vector<coefficients> c;
  std::vector<double> t;
  for (const sample& s : samples) {
    c.push_back(coefficients_of(s, node, o.cores, cache_bytes, o.eager_bytes, one_way));
    t.push_back(s.seconds);
  }
  std::array<bool, unknowns> free = {
      true, true, !o.gamma, oversubscribed, cache_bytes != 0, o.per_call, o.eager_bytes != 0};
  coefficients fixed = {0, 0, o.gamma ? *o.gamma : 0, 0, 0, 0, 0};
  const auto wanted = static_cast<std::size_t>(std::count(free.begin(), free.end(), true));
  if (samples.size() < wanted) {
    throw invalid_argument_error("calibrate: " + std::to_string(samples.size()) + " samples for " +
                                 std::to_string(wanted) + " unknowns");
  }
  for (;;) {
    if (!solve(c, t, free, fixed, f.x)) {
      // The call's or the rendezvous' alpha asked for but not told apart from the per-message
      // alpha (one strategy, no size past the eager limit): without them.
      if (free[call] || free[rendezvous]) {
        free[call] = free[rendezvous] = false;
        fixed[call] = fixed[rendezvous] = 0;
        continue;
      }
      throw invalid_argument_error(
          "calibrate: the samples cannot tell the parameters apart (give several sizes, from "
          "latency-bound to bandwidth-bound, and two strategies to separate beta from gamma)");
    }
    // A negative coefficient means the data does not see it: 0, and fit the others again.
    bool again = false;
    for (std::size_t i = 0; i < unknowns; ++i) {
      if (free[i] && f.x[i] < 0) {
        free[i] = false;
        fixed[i] = 0;
        again = true;
      }
    }
    if (!again) break;
  }
  for (std::size_t k = 0; k < c.size(); ++k) {
    double predicted = 0;
    for (std::size_t i = 0; i < unknowns; ++i) predicted += c[k][i] * f.x[i];
    f.errors.push_back(predicted / t[k] - 1);
    f.objective += f.errors.back() * f.errors.back();
  }
  return f;
}

bool one_way_strategy(algorithm a) {
  return a == algorithm::tree || a == algorithm::parameter_server;
}

}  // namespace

calibration calibrate(const std::vector<sample>& samples, const calibrate_options& options) {
  int node = 1;  // every sample's ranks on one node
  bool oversubscribed = false, cached = false, uncached = false, one_way = false, exchange = false;
  for (const sample& s : samples) {
    if (!(s.seconds > 0)) {
      throw invalid_argument_error("calibrate: a sample of " + std::to_string(s.bytes) +
                                   " bytes took no time");
    }
    node = std::max(node, s.ranks);
    if (options.cores > 0 && s.ranks > options.cores) oversubscribed = true;
    (options.cache_bytes != 0 && s.bytes <= options.cache_bytes ? cached : uncached) = true;
    (one_way_strategy(s.algo) ? one_way : exchange) = true;
  }
  // Both sides of the cache size measured, or one beta for all.
  const std::size_t cache_bytes = cached && uncached ? options.cache_bytes : 0;
  double factor = 1;
  linear_fit best = fit_at(samples, node, options, cache_bytes, oversubscribed, factor);
  if (options.one_way && one_way && exchange) {
    // The objective is smooth in the factor: a coarse search, then a fine one around the best.
    constexpr double lowest = 0.1, highest = 2.0;
    const auto search = [&](double from, double to, double step) {
      for (double f = std::max(from, lowest); f <= std::min(to, highest) + step / 2; f += step) {
        linear_fit at = fit_at(samples, node, options, cache_bytes, oversubscribed, f);
        if (at.objective < best.objective) {
          best = std::move(at);
          factor = f;
        }
      }
    };
    search(lowest, highest, 0.05);
    search(factor - 0.05, factor + 0.05, 0.005);
  }
  const coefficients& x = best.x;
  calibration out;
  out.fitted.inter = out.fitted.intra = link{x[0], x[1]};
  out.fitted.gamma = x[2];
  out.fitted.oversubscribed_alpha = x[3];
  out.fitted.ranks_per_node = node;
  out.fitted.cores_per_node = options.cores;
  out.fitted.cached_beta = x[4];
  out.fitted.cache_bytes = cache_bytes;
  out.fitted.call_alpha = x[call];
  out.fitted.eager_bytes = x[rendezvous] > 0 ? options.eager_bytes : 0;
  out.fitted.rendezvous_alpha = x[rendezvous];
  out.fitted.one_way = factor;
  out.errors = best.errors;
  std::vector<double> abs_errors;
  for (double e : out.errors) abs_errors.push_back(std::fabs(e));
  std::sort(abs_errors.begin(), abs_errors.end());
  out.median_error = abs_errors[abs_errors.size() / 2];
  out.max_error = abs_errors.back();
  return out;
}

}  // namespace distcomm::sim
