// Kernel bodies shared by every instruction-set path (kernels.cc, kernels_avx2.cc):
// plain loops that the compiler vectorises for whatever target the function that
// inlines them is compiled for. Internal to src/model; include only from kernel files.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/bf16_convert.h"
#include "model/gpt_config.h"

#define RT_INLINE inline __attribute__((always_inline))

namespace rt::model::kernel_body {

// Column chunk for reductions over rows: one cache line of floats per step.
constexpr int64_t kColChunk = 64;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluC = 0.044715f;

constexpr int64_t kElemChunk = 4096;

// Column sums over rows that give the same bits for any thread count (layer-norm and
// bias gradients): each block of kSumRows rows is summed in row order into its own
// partial, then the partials are added in block order. The rows are read once, whole.
constexpr int64_t kSumRows = 32;

// Zeroed partials (blocks, width), kept per calling thread: a fresh vector per call (up
// to ~1 MB, several calls per layer and step) is mapped and faulted in anew each time.
// Call it before the parallel region and use the pointer inside: there, the name of a
// thread_local is each worker's own.
RT_INLINE float* ZeroedPartials(int64_t blocks, int64_t width) {
  thread_local std::vector<float> partial;
  partial.assign(static_cast<size_t>(blocks * width), 0.0f);
  return partial.data();
}

// Inside a parallel region, after the barrier that completes every partial: add(i, s)
// for each column i of partials (blocks, width), s its sum over the blocks in order.
template <class Add>
RT_INLINE void AddPartialsInBlockOrder(const float* partials, int64_t blocks, int64_t width,
                                       Add add) {
  const int64_t chunks = (width + kColChunk - 1) / kColChunk;
#pragma omp for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kColChunk, c1 = std::min(width, c0 + kColChunk);
    float sum[kColChunk] = {};
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* p = partials + blk * width;
#pragma omp simd
      for (int64_t i = c0; i < c1; ++i) sum[i - c0] += p[i];
    }
    for (int64_t i = c0; i < c1; ++i) add(i, sum[i - c0]);
  }
}

// Normalises one row of C floats into `out`.
RT_INLINE void LnRow(float* out, float* mean_out, float* rstd_out, const float* x, const float* w,
                     const float* b, int64_t C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < C; ++i) sum += x[i];
  const float m = sum / static_cast<float>(C);
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < C; ++i) var += (x[i] - m) * (x[i] - m);
  const float s = 1.0f / std::sqrt(var / static_cast<float>(C) + kLayerNormEpsilon);
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) out[i] = (x[i] - m) * s * w[i] + b[i];
  *mean_out = m;
  *rstd_out = s;
}

RT_INLINE void LnForwardBody(float* out_f32, bf16_t* out_bf16, float* mean, float* rstd,
                             const float* inp, const float* w, const float* b, int64_t N,
                             int64_t C) {
#pragma omp parallel
  {
    std::vector<float> row(out_f32 == nullptr ? C : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      float* o = out_f32 != nullptr ? out_f32 + r * C : row.data();
      LnRow(o, mean + r, rstd + r, inp + r * C, w, b, C);
      if (out_bf16 != nullptr) FloatToBf16N(o, out_bf16 + r * C, C);
    }
  }
}
RT_INLINE void LnBackwardBody(float* dinp, float* dw, float* db, const float* dout,
                              const float* inp, const float* w, const float* mean,
                              const float* rstd, int64_t N, int64_t C) {
  // One pass over the rows: each row's dinp, and its share of dw and db into its block's
  // partial (kSumRows above). (dw and db took a second pass, by column chunks of 64
  // floats over all rows: dout and inp read twice, the second time at a stride.)
  const int64_t blocks = (N + kSumRows - 1) / kSumRows;
  float* const base = ZeroedPartials(blocks, 2 * C);  // (blocks, 2C): dw's, then db's
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      float* aw = base + blk * 2 * C;
      float* ab = aw + C;
      for (int64_t r = blk * kSumRows; r < std::min(N, (blk + 1) * kSumRows); ++r) {
        const float* x = inp + r * C;
        const float* g = dout + r * C;
        float* d = dinp + r * C;
        const float m = mean[r], s = rstd[r];
        float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dnx)
        for (int64_t i = 0; i < C; ++i) {
          const float dn = g[i] * w[i];
          sum_dn += dn;
          sum_dnx += dn * (x[i] - m) * s;
        }
        const float a = sum_dn / static_cast<float>(C), c = sum_dnx / static_cast<float>(C);
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) {
          const float xhat = (x[i] - m) * s;
          d[i] += s * (g[i] * w[i] - a - xhat * c);
          aw[i] += g[i] * xhat;
          ab[i] += g[i];
        }
      }
    }
    // (the barrier at the end of the loop above: every partial is complete)
    AddPartialsInBlockOrder(base, blocks, 2 * C,
                            [&](int64_t i, float sum) { (i < C ? dw[i] : db[i - C]) += sum; });
  }
}

// Bias gradient db[j] += sum over the M rows of dout[r][j] (by blocks of rows, kSumRows
// above), and (bf16 runs) the bf16 copy of dout, converted whole rows at a time on the
// way. (Summing a column chunk over all rows, as before, read dout 64 floats per row at a
// stride, and converted it 64 floats per call: 3.9% of a bf16 step on 2 threads.)
RT_INLINE void BiasBackwardBody(float* db, const float* dout, int64_t M, int64_t N,
                                bf16_t* dout_bf16) {
  const int64_t blocks = (M + kSumRows - 1) / kSumRows;
  float* const base = ZeroedPartials(blocks, N);  // (blocks, N)
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      float* acc = base + blk * N;
      for (int64_t r = blk * kSumRows; r < std::min(M, (blk + 1) * kSumRows); ++r) {
        const float* d = dout + r * N;
#pragma omp simd
        for (int64_t i = 0; i < N; ++i) acc[i] += d[i];
        if (dout_bf16 != nullptr) FloatToBf16N(d, dout_bf16 + r * N, N);
      }
    }
    // (the barrier at the end of the loop above: every partial is complete)
    AddPartialsInBlockOrder(base, blocks, N, [&](int64_t i, float sum) { db[i] += sum; });
  }
}

// ---- llama: RMSNorm and rotary embeddings ----------------------------------------

// out (N,C) = inp * rstd * w with rstd = 1/sqrt(mean(inp^2) + eps) per row (saved).
RT_INLINE void RmsForwardBody(float* out_f32, bf16_t* out_bf16, float* rstd, const float* inp,
                              const float* w, int64_t N, int64_t C) {
#pragma omp parallel
  {
    std::vector<float> row(out_f32 == nullptr ? C : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      float* o = out_f32 != nullptr ? out_f32 + r * C : row.data();
      const float* x = inp + r * C;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < C; ++i) ss += x[i] * x[i];
      const float s = 1.0f / std::sqrt(ss / static_cast<float>(C) + kRmsNormEpsilon);
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) o[i] = x[i] * s * w[i];
      rstd[r] = s;
      if (out_bf16 != nullptr) FloatToBf16N(o, out_bf16 + r * C, C);
    }
  }
}

// With xhat = x s and g = dout w: dx = s (g - xhat mean(g xhat)), dw += dout xhat.
// dinp accumulates; dw's row sums by blocks of kSumRows rows, added in block order.
RT_INLINE void RmsBackwardBody(float* dinp, float* dw, const float* dout, const float* inp,
                               const float* w, const float* rstd, int64_t N, int64_t C) {
  const int64_t blocks = (N + kSumRows - 1) / kSumRows;
  float* const base = ZeroedPartials(blocks, C);  // (blocks, C): dw's
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      float* aw = base + blk * C;
      for (int64_t r = blk * kSumRows; r < std::min(N, (blk + 1) * kSumRows); ++r) {
        const float* x = inp + r * C;
        const float* g = dout + r * C;
        float* d = dinp + r * C;
        const float s = rstd[r];
        float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
        for (int64_t i = 0; i < C; ++i) sum_gx += g[i] * w[i] * x[i] * s;
        const float c = sum_gx / static_cast<float>(C);
#pragma omp simd
        for (int64_t i = 0; i < C; ++i) {
          const float xhat = x[i] * s;
          d[i] += s * (g[i] * w[i] - xhat * c);
          aw[i] += g[i] * xhat;
        }
      }
    }
    // (the barrier at the end of the loop above: every partial is complete)
    AddPartialsInBlockOrder(base, blocks, C, [&](int64_t i, float sum) { dw[i] += sum; });
  }
}

// Rotary embeddings in place on the q and k heads of qkv (B*T rows of 3C; the first
// 2*NH heads of hs channels each): pair (i, i + hs/2) of a head at position t turns by
// angle t * theta_i, whose cos and sin are rope (T, hs) = [cos (hs/2) | sin (hs/2)] per t.
// sign = +1 forward; sign = -1 turns back, which is the backward (the transpose of a
// rotation is its inverse), applied to dL/dq and dL/dk.
RT_INLINE void RopeBody(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH,
                        int64_t hs, float sign) {
  const int64_t half = hs / 2, C = NH * hs;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = rope + (r % T) * hs;
    const float* sn = cs + half;
    for (int64_t h = 0; h < 2 * NH; ++h) {
      float* x = qkv + r * 3 * C + h * hs;
      float* y = x + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = x[i], b = y[i], s = sign * sn[i];
        x[i] = a * cs[i] - b * s;
        y[i] = b * cs[i] + a * s;
      }
    }
  }
}

}  // namespace rt::model::kernel_body
