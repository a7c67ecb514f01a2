// Calibration of the cost model (distcomm-sim calibrate): the alpha, beta and gamma of one kind of
// link that best explain measured allreduce times, by least squares on the relative error. Every
// closed form of cost.hpp is linear in (alpha, beta, gamma) on one kind of link, so the fit is a
// linear one: each sample's coefficients are the model's time at (1, 0, 0), (0, 1, 0), (0, 0, 1).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "distcomm/sim/cost.hpp"

namespace distcomm::sim {

// One measured allreduce.
struct sample {
  algorithm algo = algorithm::ring;
  int ranks = 2;
  std::size_t bytes = 0;
  double seconds = 0;
  int ps_servers = 1;
};

struct calibration {
  machine fitted;           // inter = intra = the fitted link, one rank per node
  double median_error = 0;  // |predicted / measured - 1| over the samples
  double max_error = 0;
  std::vector<double> errors;  // signed predicted / measured - 1, one per sample
};

// invalid_argument_error with fewer samples than unknowns, or samples that cannot separate
// them (e.g. one size only). `gamma`, when given, is kept (e.g. from distcomm-bench-kernels) and
// only alpha and beta are fitted. Coefficients that come out negative are set to 0 and the rest
// refitted.
calibration calibrate(const std::vector<sample>& samples, std::optional<double> gamma = {});

}  // namespace distcomm::sim
