// Bulk float <-> bfloat16 conversion, vectorised (AVX-512 / AVX-512-BF16 chosen at run
// time, scalar fallback). Rounds to nearest even like FloatToBf16 in core/bf16.h.
// Used by the model (bf16 matmul inputs) and by codecs. Single-threaded: callers split
// large arrays across threads themselves.
#pragma once

#include <cstddef>

#include "core/bf16.h"

namespace rt {

// dst[i] = bf16(src[i]) for i < n. NaN stays NaN on every path; the AVX-512-BF16 path
// flushes float denormals to (signed) zero, the others round them like FloatToBf16.
void FloatToBf16N(const float* src, bf16_t* dst, size_t n);
// dst[i] = float(src[i]) for i < n (exact).
void Bf16ToFloatN(const bf16_t* src, float* dst, size_t n);

}  // namespace rt
