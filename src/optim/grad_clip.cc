// Deterministic sum of squares and the clip factor.
#include "optim/grad_clip.h"

#include <cmath>
#include <vector>

namespace rt::optim {
namespace {
// Block size fixed independently of the thread count, so the order of additions (and
// hence the bits of the result) never depends on how many threads ran.
constexpr size_t kBlockFloats = 1 << 14;
}  // namespace

double SumOfSquares(absl::Span<const float> x) {
  const size_t n = x.size();
  const long num_blocks = static_cast<long>((n + kBlockFloats - 1) / kBlockFloats);
  std::vector<double> block_sums(num_blocks, 0.0);
  const float* data = x.data();
#pragma omp parallel for schedule(static)
  for (long b = 0; b < num_blocks; ++b) {
    const size_t begin = static_cast<size_t>(b) * kBlockFloats;
    const size_t end = begin + kBlockFloats < n ? begin + kBlockFloats : n;
    // Eight independent lanes let the compiler vectorise without reassociating.
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
      for (int l = 0; l < 8; ++l) {
        const double d = data[i + l];
        lanes[l] += d * d;
      }
    }
    double s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
               ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    for (; i < end; ++i) s += static_cast<double>(data[i]) * data[i];
    block_sums[b] = s;
  }
  double total = 0.0;
  for (double s : block_sums) total += s;
  return total;
}

float ClipScale(double global_norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  if (!std::isfinite(global_norm)) return 0.0f;
  if (global_norm <= max_norm) return 1.0f;
  return static_cast<float>(max_norm / global_norm);
}

}  // namespace rt::optim
