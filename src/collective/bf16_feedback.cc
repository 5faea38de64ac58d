// Vectorizable bf16 rounding loops (see bf16_feedback.h).
#include "collective/bf16_feedback.h"

namespace rt::collective {

void RoundToBf16WithFeedback(const float* v, bf16_t* q, float* residual, size_t n) {
  if (residual == nullptr) {
    for (size_t i = 0; i < n; ++i) q[i] = RoundToBf16(v[i]);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const bf16_t r = RoundToBf16(v[i]);
    q[i] = r;
    residual[i] = v[i] - Bf16ToFloat(r);
  }
}

void AddAndRoundToBf16(const bf16_t* a, const float* b, bf16_t* q, float* residual, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float v = Bf16ToFloat(a[i]) + b[i];
    const bf16_t r = RoundToBf16(v);
    q[i] = r;
    if (residual != nullptr) residual[i] = v - Bf16ToFloat(r);
  }
}

}  // namespace rt::collective
