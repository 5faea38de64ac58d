// What `ringtrain bench allreduce` reduces, and how it checks the result.
//
// integer (default): peer r contributes an integer in [-8, 7] at element i, the
//   same every iteration, so fp32 and bf16 sums are exact and are checked element
//   by element.
// gradient: gradient-like values, as codec calibration uses (codec_calibration.cc):
//   roughly Gaussian, full 23-bit mantissas, magnitudes spread over 3 decades by a
//   per-block scale, different per peer and iteration. Integers have 16 distinct
//   values, which zstd shrinks far below what real gradients allow; these do not,
//   so top-k and `auto` wire bytes and times are the ones training would see.
//   Each value is a hash of (i, rank, iteration): any peer can recompute every
//   peer's contribution, so a dense fp32 result is still checked element by element,
//   within the rounding that ring order allows (see VerifyDenseSum).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::cli {

enum class BenchValues { kInteger, kGradient };

// "integer" or "gradient"; anything else is refused naming both.
absl::StatusOr<BenchValues> ParseBenchValues(const std::string& text);
const char* BenchValuesName(BenchValues values);

// Peer `rank`'s contribution at element i in iteration `iteration`.
float BenchValue(BenchValues values, size_t i, int rank, int iteration);
void FillBenchValues(BenchValues values, absl::Span<float> data, int rank, int iteration);

// Checks a dense sum over `peers` peers of iteration `iteration`'s contributions,
// element by element. integer: exact (fp32 and bf16 wire). gradient (fp32 wire
// only): |result - exact sum| <= peers * 2^-23 * sum of |contributions|, the bound
// for fp32 additions in any order. The error names the element and both values.
absl::Status VerifyDenseSum(BenchValues values, absl::Span<const float> result, int peers,
                            int iteration);

}  // namespace rt::cli
