// Calibration of the cost model (distcomm-sim calibrate): the alpha, beta and gamma of one kind of
// link (the ranks of the samples on one node) that best explain measured allreduce times, by
// least squares on the relative error; with samples of more ranks than the node's cores, also
// the oversubscribed alpha, and with a cache size, the beta of the allreduces that fit in it. Every
// closed form of cost.hpp is linear in these on one kind of link, so the fit is a linear one: each
// sample's coefficients are the model's time at one unknown 1 and the others 0.
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
  machine fitted;  // inter = intra = the fitted link; the samples' largest rank count per node
  double median_error = 0;  // |predicted / measured - 1| over the samples
  double max_error = 0;
  std::vector<double> errors;  // signed predicted / measured - 1, one per sample
};

// invalid_argument_error with fewer samples than unknowns, or samples that cannot separate
// them (e.g. one size only). `gamma`, when given, is kept (e.g. from distcomm-bench-kernels) and
// only alpha and beta are fitted. `cores`: the cores of the node the samples ran on (0: as many
// as ranks); samples of more ranks add oversubscribed_alpha to the unknowns. `cache_bytes`
// (0: none): with samples on both sides of it, cached_beta is fitted for the smaller ones.
// `per_call`: call_alpha, a cost per allreduce, is fitted too; `eager_bytes` (0: none): the
// rendezvous_alpha of messages past it too (either left out, at 0, when the samples cannot tell
// it from alpha). Coefficients that come out negative are set to 0 and the rest refitted.
calibration calibrate(const std::vector<sample>& samples, std::optional<double> gamma = {},
                      int cores = 0, std::size_t cache_bytes = 0, bool per_call = false,
                      std::size_t eager_bytes = 0);

}  // namespace distcomm::sim
