// The AVX2+FMA path of the kernels in kernels.h, for the CPUs most cheap VPSes have
// (AMD Zen 2/3, Intel Haswell to Broadwell: 8 floats per vector, no masks, no
// scalef). kernels.cc calls these when ActiveIsa() is avx2; they compute the same
// functions as the AVX-512 and portable paths, to float rounding. Internal to src/model.
#pragma once

#include <cstdint>

#include "core/bf16.h"

namespace rt::model::avx2 {

void LayerNormForward(float* out_f32, bf16_t* out_bf16, float* mean, float* rstd, const float* inp,
                      const float* w, const float* b, int64_t N, int64_t C);
void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int64_t N, int64_t C);
void BiasBackward(float* db, const float* dout, int64_t M, int64_t N, bf16_t* dout_bf16);
void GeluForward(float* out_f32, bf16_t* out_bf16, const float* inp, int64_t n);
void GeluBackward(float* dinout, const float* inp, int64_t n);
// One causal row: a[0..n) = softmax(scale * a[0..n)), a[n..T) = 0.
void SoftmaxRow(float* a, int64_t n, int64_t T, float scale);
// One row of the softmax backward: d = a * (d - <a, d>) * scale over [0, n), 0 after.
void SoftmaxBackRow(float* d, const float* a, int64_t n, int64_t T, float scale);
// One row of the fused softmax + cross-entropy (kernels.h SoftmaxCrossEntropy).
double CrossEntropyRow(float* x, int64_t V, int32_t target, bool backward, float gs);

// llama (kernels.h): RMSNorm, rotary embeddings (sign -1 = backward), one SwiGLU row.
void RmsNormForward(float* out_f32, bf16_t* out_bf16, float* rstd, const float* inp, const float* w,
                    int64_t N, int64_t C);
void RmsNormBackward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                     const float* rstd, int64_t N, int64_t C);
void Rope(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs,
          float sign);
// o = silu(g) * u over F floats.
void SwigluRow(float* o, const float* g, const float* u, int64_t F);
// dg = d u silu'(g), du = d silu(g) over F floats.
void SwigluBackRow(float* dg, float* du, const float* d, const float* g, const float* u, int64_t F);

}  // namespace rt::model::avx2
