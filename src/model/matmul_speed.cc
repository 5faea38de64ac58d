// MeasureMatmul and GetBf16Support (see matmul_speed.h).
#include "model/matmul_speed.h"

#include <algorithm>
#include <random>

#include "core/aligned_buffer.h"
#include "core/bf16_convert.h"
#include "core/clock.h"

namespace rt::model {

absl::StatusOr<MatmulSpeed> MeasureMatmul(MatType type, int64_t n, int reps) {
  MatmulEngine mm;
  AlignedBuffer<float> a(n * n), b(n * n), c(n * n);
  AlignedBuffer<bf16_t> ah(n * n), bh(n * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = u(rng);
    b[i] = u(rng);
  }
  FloatToBf16N(a.data(), ah.data(), n * n);
  FloatToBf16N(b.data(), bh.data(), n * n);
  const bool h = type == MatType::kBf16;
  const void* ap = h ? static_cast<const void*>(ah.data()) : a.data();
  const void* bp = h ? static_cast<const void*>(bh.data()) : b.data();
  const MatOperand d = RowMajor(n, n, n);
  mm.Run(type, d, ap, d, bp, d, c.data(), nullptr, false);  // warm-up + primitive creation
  if (!mm.status().ok()) return mm.status();
  double best_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    Stopwatch sw;
    mm.Run(type, d, ap, d, bp, d, c.data(), nullptr, false);
    best_s = std::min(best_s, sw.ElapsedSeconds());
  }
  if (!mm.status().ok()) return mm.status();
  MatmulSpeed s;
  s.gflops = 2.0 * static_cast<double>(n) * n * n / best_s * 1e-9;
  s.impl = mm.ImplName(type, d, d, d, false, false);
  return s;
}

Bf16Support GetBf16Support() {
  if (OneDnnHasNativeBf16()) return Bf16Support::kNative;
  MatmulEngine mm;
  const MatOperand d = RowMajor(16, 16, 16);
  return mm.ImplName(MatType::kBf16, d, d, d, false, false).empty() ? Bf16Support::kUnavailable
                                                                    : Bf16Support::kEmulated;
}

const char* Bf16SupportName(Bf16Support s) {
  switch (s) {
    case Bf16Support::kNative:
      return "native";
    case Bf16Support::kEmulated:
      return "emulated";
    case Bf16Support::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

}  // namespace rt::model
