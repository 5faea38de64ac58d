// Bulk bf16 rounding with error feedback, written so the compiler vectorizes it.
// Bit-identical to rt::FloatToBf16 (round to nearest even, NaN stays NaN) on every
// CPU, so peers with and without AVX-512-BF16 round the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bf16.h"

namespace rt::collective {

// Branch-free FloatToBf16.
inline bf16_t RoundToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<bf16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// For i < n: q[i] = bf16(v[i]); residual[i] = v[i] - q[i] (exact in fp32).
// residual may be null (no error feedback).
void RoundToBf16WithFeedback(const float* v, bf16_t* q, float* residual, size_t n);

// For i < n: v[i] = a[i] + b[i] (a: bf16 partial sums), then as above.
void AddAndRoundToBf16(const bf16_t* a, const float* b, bf16_t* q, float* residual, size_t n);

}  // namespace rt::collective
