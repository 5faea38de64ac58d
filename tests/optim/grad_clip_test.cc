// Global-norm clipping helpers: exact sums, thread-count independence, the clip factor.
#include "optim/grad_clip.h"

#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

using rt::optim::ClipScale;
using rt::optim::SumOfSquares;

TEST_CASE("SumOfSquares matches a plain double loop") {
  std::vector<float> x(100003);
  double expected = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f;
    expected += static_cast<double>(x[i]) * x[i];
  }
  CHECK(SumOfSquares(x) == doctest::Approx(expected).epsilon(1e-12));
  CHECK(SumOfSquares({}) == 0.0);
  std::vector<float> small = {3.0f, 4.0f};
  CHECK(SumOfSquares(small) == 25.0);
}

TEST_CASE("SumOfSquares gives the same bits for 1 and 2 threads") {
  std::vector<float> x(300000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / (1.0f + static_cast<float>(i % 977));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = SumOfSquares(x);
  omp_set_num_threads(2);
  double two = SumOfSquares(x);
  omp_set_num_threads(saved);
  CHECK(one == two);
}

TEST_CASE("ClipScale clips only above max_norm") {
  CHECK(ClipScale(0.5, 1.0f) == 1.0f);
  CHECK(ClipScale(1.0, 1.0f) == 1.0f);
  CHECK(ClipScale(4.0, 1.0f) == doctest::Approx(0.25f));
  CHECK(ClipScale(1e9, 0.0f) == 1.0f);  // clipping off
  CHECK(ClipScale(std::numeric_limits<double>::infinity(), 1.0f) == 0.0f);
  CHECK(ClipScale(std::nan(""), 1.0f) == 0.0f);
  // After scaling, the norm is exactly max_norm (within float rounding).
  std::vector<float> g = {30.0f, 40.0f};
  float s = ClipScale(std::sqrt(SumOfSquares(g)), 5.0f);
  CHECK(std::sqrt((g[0] * s) * (g[0] * s) + (g[1] * s) * (g[1] * s)) == doctest::Approx(5.0f));
}
