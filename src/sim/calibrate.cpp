#include "distcomm/sim/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include "distcomm/core/error.hpp"

namespace distcomm::sim {

namespace {

using coefficients = std::array<double, 3>;  // seconds per unit of alpha, beta, gamma

coefficients coefficients_of(const sample& s) {
  coefficients c{};
  for (std::size_t i = 0; i < 3; ++i) {
    machine unit;
    link l{i == 0 ? 1.0 : 0.0, i == 1 ? 1.0 : 0.0};
    unit.inter = unit.intra = l;
    unit.gamma = i == 2 ? 1.0 : 0.0;
    c[i] = allreduce_seconds(s.algo, unit, s.bytes, s.ranks, s.ps_servers);
  }
  return c;
}

// Least squares of sum_k ((c_k . x) / t_k - 1)^2 over the unknowns marked free (the others 0 or
// fixed); false when the normal equations are singular.
bool solve(const std::vector<coefficients>& c, const std::vector<double>& t,
           const std::array<bool, 3>& free, const std::array<double, 3>& fixed,
           std::array<double, 3>& x) {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < 3; ++i) {
    if (free[i]) idx.push_back(i);
  }
  const std::size_t n = idx.size();
  double a[3][4] = {};
  for (std::size_t k = 0; k < c.size(); ++k) {
    // Row k scaled by 1/t_k; the right side 1 minus what the fixed unknowns give.
    double rhs = 1.0;
    for (std::size_t i = 0; i < 3; ++i) {
      if (!free[i]) rhs -= c[k][i] * fixed[i] / t[k];
    }
    for (std::size_t r = 0; r < n; ++r) {
      const double cr = c[k][idx[r]] / t[k];
      for (std::size_t q = 0; q < n; ++q) a[r][q] += cr * c[k][idx[q]] / t[k];
      a[r][3] += cr * rhs;
    }
  }
  // Each unknown scaled to a unit diagonal (they differ by orders of magnitude: seconds per
  // message against seconds per byte), then Gaussian elimination with partial pivoting; a pivot
  // that vanishes next to 1 means samples that do not tell the unknowns apart.
  double scale[3] = {1, 1, 1};
  for (std::size_t r = 0; r < n; ++r) {
    if (a[r][r] <= 0) return false;
    scale[r] = 1 / std::sqrt(a[r][r]);
  }
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t q = 0; q < n; ++q) a[r][q] *= scale[r] * scale[q];
    a[r][3] *= scale[r];
  }
  for (std::size_t col = 0; col < n; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < n; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    if (std::fabs(a[pivot][col]) < 1e-9) return false;
    for (std::size_t q = 0; q < 4; ++q) std::swap(a[col][q], a[pivot][q]);
    for (std::size_t r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (std::size_t q = col; q < 4; ++q) a[r][q] -= f * a[col][q];
    }
  }
  x = fixed;
  for (std::size_t r = 0; r < n; ++r) {
    x[idx[r]] = a[r][3] / a[r][r] * scale[r];
    if (!std::isfinite(x[idx[r]])) return false;
  }
  return true;
}

}  // namespace

calibration calibrate(const std::vector<sample>& samples, std::optional<double> gamma) {
  std::vector<coefficients> c;
  std::vector<double> t;
  for (const sample& s : samples) {
    if (!(s.seconds > 0)) {
      throw invalid_argument_error("calibrate: a sample of " + std::to_string(s.bytes) +
                                   " bytes took no time");
    }
    c.push_back(coefficients_of(s));
    t.push_back(s.seconds);
  }
  std::array<bool, 3> free = {true, true, !gamma};
  std::array<double, 3> fixed = {0, 0, gamma ? *gamma : 0};
  const std::size_t unknowns = gamma ? 2 : 3;
  if (samples.size() < unknowns) {
    throw invalid_argument_error("calibrate: " + std::to_string(samples.size()) + " samples for " +
                                 std::to_string(unknowns) + " unknowns");
  }
  std::array<double, 3> x{};
  for (;;) {
    if (!solve(c, t, free, fixed, x)) {
      throw invalid_argument_error(
          "calibrate: the samples cannot tell the parameters apart (give several sizes, from "
          "latency-bound to bandwidth-bound, and two strategies to separate beta from gamma)");
    }
    // A negative coefficient means the data does not see it: 0, and fit the others again.
    bool again = false;
    for (std::size_t i = 0; i < 3; ++i) {
      if (free[i] && x[i] < 0) {
        free[i] = false;
        fixed[i] = 0;
        again = true;
      }
    }
    if (!again) break;
  }
  calibration out;
  out.fitted.inter = out.fitted.intra = link{x[0], x[1]};
  out.fitted.gamma = x[2];
  std::vector<double> abs_errors;
  for (std::size_t k = 0; k < c.size(); ++k) {
    const double predicted = c[k][0] * x[0] + c[k][1] * x[1] + c[k][2] * x[2];
    out.errors.push_back(predicted / t[k] - 1);
    abs_errors.push_back(std::fabs(out.errors.back()));
  }
  std::sort(abs_errors.begin(), abs_errors.end());
  out.median_error = abs_errors[abs_errors.size() / 2];
  out.max_error = abs_errors.back();
  return out;
}

}  // namespace distcomm::sim
