// bench allreduce's values (cli/bench_values.h): gradient values look like gradients
// (full mantissas, magnitudes over decades, as incompressible as real ones), are
// reproducible by any peer, and the dense check accepts fp32 sums in any order but
// refuses a wrong element, naming it.
#include "cli/bench_values.h"

#include <doctest/doctest.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

namespace rt::cli {
namespace {

std::vector<float> Values(BenchValues kind, size_t n, int rank, int iteration) {
  std::vector<float> v(n);
  FillBenchValues(kind, absl::MakeSpan(v), rank, iteration);
  return v;
}

// Compressed size / raw size with zstd level 1 (what the top-k codec uses by default).
double ZstdRatio(const std::vector<float>& v) {
  std::vector<char> out(ZSTD_compressBound(v.size() * 4));
  const size_t n = ZSTD_compress(out.data(), out.size(), v.data(), v.size() * 4, 1);
  REQUIRE_FALSE(ZSTD_isError(n));
  return static_cast<double>(n) / (v.size() * 4.0);
}

}  // namespace

TEST_CASE("bench values: names are parsed, anything else is refused naming it") {
  CHECK(*ParseBenchValues("integer") == BenchValues::kInteger);
  CHECK(*ParseBenchValues("gradient") == BenchValues::kGradient);
  auto bad = ParseBenchValues("floats");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("'floats'") != std::string::npos);
}

TEST_CASE("bench values: gradient values look like gradients, integers do not") {
  const size_t n = size_t{1} << 20;
  const std::vector<float> g = Values(BenchValues::kGradient, n, 1, 3);
  const std::vector<float> ints = Values(BenchValues::kInteger, n, 1, 3);
  std::set<float> distinct(g.begin(), g.end());
  CHECK(distinct.size() > n * 9 / 10);  // full mantissas: nearly all distinct
  double sum = 0, abs_sum = 0;
  float lo = INFINITY, hi = 0;
  for (float x : g) {
    sum += x;
    abs_sum += std::fabs(x);
    if (x != 0) lo = std::min(lo, std::fabs(x)), hi = std::max(hi, std::fabs(x));
  }
  CHECK(std::fabs(sum) < 0.01 * abs_sum);  // centred on zero
  CHECK(hi < 3e-3f);
  // Per-block scales over 3 decades: the typical magnitudes of blocks differ by > 100x.
  std::vector<double> block_mean;
  for (size_t b = 0; b + 4096 <= n; b += 4096) {
    double m = 0;
    for (size_t i = b; i < b + 4096; ++i) m += std::fabs(g[i]);
    block_mean.push_back(m / 4096);
  }
  const auto [min_b, max_b] = std::minmax_element(block_mean.begin(), block_mean.end());
  CHECK(*max_b > 100 * *min_b);
  // What zstd sees: integers shrink far more than gradient-like values do.
  const double g_ratio = ZstdRatio(g), int_ratio = ZstdRatio(ints);
  MESSAGE("zstd -1 ratio: gradient values " << g_ratio << ", integer values " << int_ratio);
  CHECK(g_ratio > 0.75);
  CHECK(int_ratio < 0.5);
}

TEST_CASE("bench values: any peer recomputes any peer's value, and they differ") {
  const std::vector<float> a = Values(BenchValues::kGradient, 1000, 2, 5);
  for (size_t i = 0; i < a.size(); i += 97) {
    CHECK(BenchValue(BenchValues::kGradient, i, 2, 5) == a[i]);
  }
  CHECK(Values(BenchValues::kGradient, 1000, 2, 5) == a);
  CHECK(Values(BenchValues::kGradient, 1000, 3, 5) != a);  // another peer
  CHECK(Values(BenchValues::kGradient, 1000, 2, 6) != a);  // another iteration
  // Integer values stay the same every iteration (the exact checks rely on it).
  CHECK(Values(BenchValues::kInteger, 1000, 2, 5) == Values(BenchValues::kInteger, 1000, 2, 6));
}

TEST_CASE("bench values: the dense check accepts fp32 sums in any order, refuses a wrong one") {
  const int peers = 5, iteration = 7;
  const size_t n = 20000;
  for (BenchValues kind : {BenchValues::kInteger, BenchValues::kGradient}) {
    CAPTURE(BenchValuesName(kind));
    std::vector<float> forward(n, 0.0f), backward(n, 0.0f);
    for (int r = 0; r < peers; ++r) {
      for (size_t i = 0; i < n; ++i) {
        forward[i] += BenchValue(kind, i, r, iteration);
        backward[i] += BenchValue(kind, i, peers - 1 - r, iteration);
      }
    }
    CHECK(VerifyDenseSum(kind, forward, peers, iteration).ok());
    CHECK(VerifyDenseSum(kind, backward, peers, iteration).ok());
    // One element off by 1 (integers) or by 1% of its peers' magnitudes (far beyond
    // fp32 rounding): refused, named.
    float magnitude = 0;
    for (int r = 0; r < peers; ++r) magnitude += std::fabs(BenchValue(kind, 12345, r, iteration));
    std::vector<float> wrong = forward;
    wrong[12345] += kind == BenchValues::kInteger ? 1.0f : 0.01f * magnitude;
    absl::Status st = VerifyDenseSum(kind, wrong, peers, iteration);
    CHECK(absl::IsDataLoss(st));
    CHECK(std::string(st.message()).find("element 12345 of 20000") != std::string::npos);
    // The sum of another iteration is wrong too (gradient values change per iteration).
    if (kind == BenchValues::kGradient) {
      CHECK_FALSE(VerifyDenseSum(kind, forward, peers, iteration + 1).ok());
    }
  }
}

}  // namespace rt::cli
