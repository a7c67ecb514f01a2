// The synthetic data set of distcomm-train-mlp and the random numbers behind it. Everything
// follows from --seed alone, on any platform: the generator is xoshiro256** seeded through
// splitmix64, and the normal and integer draws are written out here rather than taken from
// <random>, whose distributions may differ between standard libraries.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace train_mlp {

class rng {
 public:
  using state_type = std::array<std::uint64_t, 4>;

  explicit rng(std::uint64_t seed);
  explicit rng(const state_type& state) : s_(state) {}

  // The whole state: saving it in a checkpoint and constructing from it continues the stream.
  const state_type& state() const noexcept { return s_; }

  std::uint64_t next() noexcept;
  // Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept;
  // Standard normal (Box-Muller; one draw per call, the second value is dropped).
  double normal() noexcept;
  // Uniform in [0, n), unbiased (rejection); n > 0.
  std::uint64_t below(std::uint64_t n) noexcept;

 private:
  state_type s_;
};

// Independent streams derived from the one seed: the data, the initial weights, the shuffles.
enum class stream : std::uint64_t { data = 1, init = 2, shuffle = 3 };
rng make_rng(std::uint64_t seed, stream which);

// Samples of `features` floats with a class label each, stored row by row.
struct dataset {
  std::size_t features = 0;
  std::size_t classes = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;

  std::size_t size() const noexcept { return y.size(); }
  const float* sample(std::size_t i) const noexcept { return x.data() + i * features; }
};

struct data_split {
  dataset train;
  dataset test;
};

// Gaussian blobs: every class is a mixture of `clusters_per_class` unit-variance clusters whose
// centres are drawn around the origin, so the classes interleave and a linear model cannot
// separate them; two hidden layers can. Train and test samples come from the same clusters.
struct blob_spec {
  std::size_t features = 16;
  std::size_t classes = 4;
  std::size_t clusters_per_class = 3;
  double centre_spread = 1.3;  // standard deviation of the centres, per feature
};
data_split make_blobs(const blob_spec& spec, std::uint64_t seed, std::size_t train_samples,
                      std::size_t test_samples);

// A uniformly random permutation of 0..n-1 (Fisher-Yates), drawn from r.
std::vector<std::uint32_t> shuffled(std::size_t n, rng& r);

}  // namespace train_mlp
