// distcomm-params-diff: compares two parameter files of distcomm-train-mlp (--dump-params).
//   distcomm-params-diff A B                      pass when every parameter has the same bits
//   distcomm-params-diff A B --tolerance T        pass when every |a - b| <= T
//   distcomm-params-diff A B --expect-differ T    pass when some |a - b| > T (a negative control:
//                                                 the comparison can tell different runs apart)
// Prints what it found either way. Exit code 0 pass, 1 fail, 2 unreadable input.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "checkpoint.hpp"

int main(int argc, char** argv) {
  std::string path_a, path_b;
  double tolerance = -1;
  double expect_differ = -1;
  CLI::App app{"Compare two distcomm-train-mlp parameter files"};
  app.add_option("a", path_a, "First parameter file")->required();
  app.add_option("b", path_b, "Second parameter file")->required();
  auto* tol = app.add_option("--tolerance", tolerance, "Largest |a - b| accepted")
                  ->check(CLI::NonNegativeNumber);
  app.add_option("--expect-differ", expect_differ,
                 "Pass only when some |a - b| exceeds this (negative control)")
      ->check(CLI::NonNegativeNumber)
      ->excludes(tol);
  CLI11_PARSE(app, argc, argv);

  std::vector<float> a, b;
  try {
    a = train_mlp::read_params(path_a);
    b = train_mlp::read_params(path_b);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distcomm-params-diff: %s\n", e.what());
    return 2;
  }
  if (a.size() != b.size()) {
    std::printf("FAIL: %zu parameters in %s, %zu in %s\n", a.size(), path_a.c_str(), b.size(),
                path_b.c_str());
    return 1;
  }

  std::size_t bits_differ = 0;
  std::size_t worst = 0;
  double max_diff = 0;
  bool nan = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++bits_differ;
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) nan = true;
    if (d > max_diff) {
      max_diff = d;
      worst = i;
    }
  }
  std::printf("%zu parameters, %zu differ in their bits; max |a - b| = %.3g", a.size(), bits_differ,
              max_diff);
  if (bits_differ != 0) {
    std::printf(" at [%zu] (%.9g vs %.9g)", worst, static_cast<double>(a[worst]),
                static_cast<double>(b[worst]));
  }
  std::printf("%s\n", nan ? "; NaN present" : "");

  bool pass = false;
  if (expect_differ >= 0) {
    pass = nan || max_diff > expect_differ;
    std::printf("%s: expected a difference above %.3g\n", pass ? "ok" : "FAIL", expect_differ);
  } else if (tolerance >= 0) {
    pass = !nan && max_diff <= tolerance;
    std::printf("%s: tolerance %.3g\n", pass ? "ok" : "FAIL", tolerance);
  } else {
    pass = bits_differ == 0;
    std::printf("%s: bitwise comparison\n", pass ? "ok" : "FAIL");
  }
  return pass ? 0 : 1;
}
