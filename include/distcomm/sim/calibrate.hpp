// Calibration of the cost model (distcomm-sim calibrate): the alpha, beta and gamma of one kind of
// link (the ranks of the samples on one node) that best explain measured allreduce times, by
// least squares on the relative error; with samples of more ranks than the node's cores, also
// the oversubscribed alpha, and with a cache size, the beta of the allreduces that fit in it. Every
// closed form of cost.hpp is linear in these on one kind of link, so the fit is a linear one: each
// sample's coefficients are the model's time at one unknown 1 and the others 0. The one-way
// factor multiplies some of them: it is searched, with a linear fit at each value.
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

// What to fit besides alpha and beta, and what to keep.
struct calibrate_options {
  // Kept at this (e.g. from distcomm-bench-kernels): only alpha and beta are fitted for it.
  std::optional<double> gamma;
  // The cores of the node the samples ran on (0: as many as ranks); samples of more ranks add
  // oversubscribed_alpha to the unknowns.
  int cores = 0;
  // 0: none; with samples on both sides of it, cached_beta is fitted for the smaller ones.
  std::size_t cache_bytes = 0;
  // call_alpha, a cost per allreduce, too.
  bool per_call = false;
  // 0: none; the rendezvous_alpha of messages past it too.
  std::size_t eager_bytes = 0;
  // machine::one_way too, by a search over 0.1-2 (the rest stays a linear fit at each value):
  // needs samples of a one-way strategy (tree, ps) and of an exchange (ring, rd).
  bool one_way = false;
};

// invalid_argument_error with fewer samples than unknowns, or samples that cannot separate
// them (e.g. one size only). call_alpha and rendezvous_alpha are left out, at 0, when the samples
// cannot tell them from alpha, one_way at 1 without samples of both kinds. Coefficients that
// come out negative are set to 0 and the rest refitted.
calibration calibrate(const std::vector<sample>& samples, const calibrate_options& options = {});

}  // namespace distcomm::sim
