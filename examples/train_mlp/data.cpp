#include "data.hpp"

#include <cmath>
#include <limits>
#include <utility>

namespace train_mlp {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

}  // namespace

rng::rng(std::uint64_t seed) {
  // splitmix64 never yields four zero words in a row, the one state xoshiro must not start in.
  for (auto& w : s_) w = splitmix64(seed);
}

std::uint64_t rng::next() noexcept {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double rng::uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double rng::normal() noexcept {
  constexpr double two_pi = 6.283185307179586476925286766559;
  const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

std::uint64_t rng::below(std::uint64_t n) noexcept {
  // Values below `reject` would make the low residues more likely than the others.
  const std::uint64_t reject = (std::numeric_limits<std::uint64_t>::max() - n + 1) % n;
  std::uint64_t x = next();
  while (x < reject) x = next();
  return x % n;
}

rng make_rng(std::uint64_t seed, stream which) {
  return rng(seed ^ (static_cast<std::uint64_t>(which) * 0xd1b54a32d192ed03ULL));
}

data_split make_blobs(const blob_spec& spec, std::uint64_t seed, std::size_t train_samples,
                      std::size_t test_samples) {
  rng r = make_rng(seed, stream::data);
  const std::size_t clusters = spec.classes * spec.clusters_per_class;
  std::vector<double> centres(clusters * spec.features);
  for (double& c : centres) c = spec.centre_spread * r.normal();

  const auto fill = [&](dataset& d, std::size_t n) {
    d.features = spec.features;
    d.classes = spec.classes;
    d.x.resize(n * spec.features);
    d.y.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t cluster = r.below(clusters);
      d.y[i] = static_cast<std::int32_t>(cluster % spec.classes);
      const double* c = centres.data() + cluster * spec.features;
      float* x = d.x.data() + i * spec.features;
      for (std::size_t f = 0; f < spec.features; ++f) {
        x[f] = static_cast<float>(c[f] + r.normal());
      }
    }
  };
  data_split s;
  fill(s.train, train_samples);
  fill(s.test, test_samples);
  return s;
}

std::vector<std::uint32_t> shuffled(std::size_t n, rng& r) {
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = r.below(i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace train_mlp
