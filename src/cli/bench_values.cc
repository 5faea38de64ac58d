// Contributions and the dense result check of `bench allreduce` (see bench_values.h).
#include "cli/bench_values.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_format.h"

namespace rt::cli {
namespace {

// A 32-bit mix of (i, rank, salt): cheap, well spread (murmur3's finalizer).
inline uint32_t Mix(uint64_t i, uint32_t rank, uint32_t salt) {
  uint64_t h = i * 0x9E3779B97F4A7C15ull ^ (uint64_t{rank} << 32 | salt) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return static_cast<uint32_t>(h);
}

// The integer values of the default mode: in [-8, 7], per (i, rank).
inline float IntegerValue(size_t i, int rank) {
  const uint32_t h = (static_cast<uint32_t>(i) ^ (static_cast<uint32_t>(i >> 32) * 0x85EBCA6Bu) ^
                      (static_cast<uint32_t>(rank) * 0x9E3779B9u)) *
                     0x2545F491u;
  return static_cast<float>(static_cast<int>(h >> 28) - 8);
}

constexpr size_t kScaleBlock = 4096;  // elements sharing one magnitude scale

inline float GradientValue(size_t i, int rank, int iteration) {
  const uint32_t salt = static_cast<uint32_t>(iteration) * 2 + 1;
  // Per block: a scale of 1e-3 .. 1e-6 (3 decades), as layers' gradients differ.
  const uint32_t b = Mix(i / kScaleBlock, static_cast<uint32_t>(rank), salt ^ 0x5bd1e995u);
  const float scale = 1e-3f * std::exp2(-9.97f * static_cast<float>(b >> 8) * (1.0f / (1 << 24)));
  // Per element: the sum of four uniforms in [-0.5, 0.5), about Gaussian (variance 1/3).
  const uint32_t a = Mix(i, static_cast<uint32_t>(rank), salt);
  const uint32_t c = Mix(i, static_cast<uint32_t>(rank), salt ^ 0x68e31da4u);
  const float u = static_cast<float>(a & 0xFFFF) + static_cast<float>(a >> 16) +
                  static_cast<float>(c & 0xFFFF) + static_cast<float>(c >> 16);
  return (u * (1.0f / 65536.0f) - 2.0f) * scale;
}

}  // namespace

absl::StatusOr<BenchValues> ParseBenchValues(const std::string& text) {
  if (text == "integer") return BenchValues::kInteger;
  if (text == "gradient") return BenchValues::kGradient;
  return absl::InvalidArgumentError(
      absl::StrFormat("--values must be integer or gradient, got '%s'", text));
}

const char* BenchValuesName(BenchValues values) {
  return values == BenchValues::kInteger ? "integer" : "gradient";
}

float BenchValue(BenchValues values, size_t i, int rank, int iteration) {
  return values == BenchValues::kInteger ? IntegerValue(i, rank)
                                         : GradientValue(i, rank, iteration);
}

void FillBenchValues(BenchValues values, absl::Span<float> data, int rank, int iteration) {
  if (values == BenchValues::kInteger) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = IntegerValue(i, rank);
    return;
  }
  for (size_t i = 0; i < data.size(); ++i) data[i] = GradientValue(i, rank, iteration);
}

absl::Status VerifyDenseSum(BenchValues values, absl::Span<const float> result, int peers,
                            int iteration) {
  for (size_t i = 0; i < result.size(); ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < peers; ++r) {
      const float x = BenchValue(values, i, r, iteration);
      exact += x;
      magnitude += std::fabs(x);
    }
    const bool ok = values == BenchValues::kInteger
                        ? result[i] == exact  // integer sums are exact in fp32, in any order
                        : std::fabs(result[i] - exact) <= peers * 0x1p-23 * magnitude;
    if (!ok) {
      return absl::DataLossError(absl::StrFormat(
          "allreduce result is WRONG at element %d of %d: got %.9g, expected %.9g (%s values)", i,
          result.size(), result[i], exact, BenchValuesName(values)));
    }
  }
  return absl::OkStatus();
}

}  // namespace rt::cli
