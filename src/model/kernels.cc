// Vectorised kernels (see kernels.h): the AVX-512 path, the portable one, and the
// dispatch to them and to the AVX2 path (kernels_avx2.cc) by ActiveIsa(). Layer norm
// has a body written once (kernels_body.h) and compiled per target. exp() is an explicit AVX-512
// polynomial because GCC does not vectorise expf without -ffast-math.
#include "model/kernels.h"

// GCC 12 reports false -Wmaybe-uninitialized inside immintrin.h when AVX-512 comes
// from target attributes rather than -m flags (_mm512_undefined_* placeholders).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/bf16_convert.h"
#include "core/cpu_features.h"
#include "model/gpt_config.h"
#include "model/kernels_avx2.h"
#include "model/kernels_body.h"

namespace rt::model {
namespace {

using namespace kernel_body;

#define RT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

bool UseAvx512() { return ActiveIsa() >= Isa::kAvx512; }
bool UseAvx2() { return ActiveIsa() >= Isa::kAvx2; }

// ---- AVX-512 math ----------------------------------------------------------------

RT_AVX512 RT_INLINE __m512 Exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.72283f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.3888889e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3333338e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1666668e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

RT_AVX512 RT_INLINE __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// ---- bias gradient -----------------------------------------------------------------

RT_AVX512 void BiasBackwardAvx512(float* db, const float* dout, int64_t M, int64_t N,
                                  bf16_t* dout_bf16) {
  BiasBackwardBody(db, dout, M, N, dout_bf16);
}

// ---- layer norm --------------------------------------------------------------------

RT_AVX512 void LnForwardAvx512(float* o, bf16_t* oh, float* m, float* s, const float* x,
                               const float* w, const float* b, int64_t N, int64_t C) {
  LnForwardBody(o, oh, m, s, x, w, b, N, C);
}
void LnForwardGeneric(float* o, bf16_t* oh, float* m, float* s, const float* x, const float* w,
                      const float* b, int64_t N, int64_t C) {
  LnForwardBody(o, oh, m, s, x, w, b, N, C);
}

RT_AVX512 void LnBackwardAvx512(float* dinp, float* dw, float* db, const float* dout,
                                const float* inp, const float* w, const float* mean,
                                const float* rstd, int64_t N, int64_t C) {
  LnBackwardBody(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void LnBackwardGeneric(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  LnBackwardBody(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

// ---- GELU ----------------------------------------------------------------------------

RT_AVX512 void GeluForwardAvx512(float* out, bf16_t* out_h, const float* inp, int64_t n) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel
  {
    std::vector<float> tmp(out == nullptr ? kElemChunk : 0);
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
      float* o = out != nullptr ? out + i0 : tmp.data();
      for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 k = TailMask(i1 - i);
        const __m512 x = _mm512_maskz_loadu_ps(k, inp + i);
        const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        const __m512 u =
            _mm512_mul_ps(_mm512_set1_ps(kGeluK), _mm512_fmadd_ps(_mm512_set1_ps(kGeluC), x3, x));
        // 0.5 x (1 + tanh(u)) = x * sigmoid(2u): no cancellation for negative x.
        const __m512 y = _mm512_div_ps(
            x,
            _mm512_add_ps(_mm512_set1_ps(1.0f), Exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
        _mm512_mask_storeu_ps(o + (i - i0), k, y);
      }
      if (out_h != nullptr) FloatToBf16N(o, out_h + i0, i1 - i0);
    }
  }
}

void GeluForwardGeneric(float* out, bf16_t* out_h, const float* inp, int64_t n) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel
  {
    std::vector<float> tmp(out == nullptr ? kElemChunk : 0);
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
      float* o = out != nullptr ? out + i0 : tmp.data();
      for (int64_t i = i0; i < i1; ++i) {
        const float x = inp[i];
        o[i - i0] = x / (1.0f + std::exp(-2.0f * kGeluK * (x + kGeluC * x * x * x)));
      }
      if (out_h != nullptr) FloatToBf16N(o, out_h + i0, i1 - i0);
    }
  }
}

RT_AVX512 void GeluBackwardAvx512(float* d, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = TailMask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(k, inp + i);
    const __m512 x2 = _mm512_mul_ps(x, x);
    const __m512 u = _mm512_mul_ps(
        _mm512_set1_ps(kGeluK), _mm512_fmadd_ps(_mm512_set1_ps(kGeluC), _mm512_mul_ps(x2, x), x));
    // y = x s with s = sigmoid(2u): dy/dx = s + 2 x s (1 - s) du/dx, du/dx = k (1 + 3c x^2).
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 sg =
        _mm512_div_ps(one, _mm512_add_ps(one, Exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u))));
    const __m512 du = _mm512_mul_ps(_mm512_set1_ps(2.0f * kGeluK),
                                    _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kGeluC), x2, one));
    const __m512 g =
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(x, sg), _mm512_sub_ps(one, sg)), du, sg);
    _mm512_mask_storeu_ps(d + i, k, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, d + i)));
  }
}

void GeluBackwardGeneric(float* d, const float* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = std::tanh(kGeluK * (x + kGeluC * x * x * x));
    const float g =
        0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluC * x * x);
    d[i] *= g;
  }
}

// ---- llama: RMSNorm, RoPE (shared bodies), SwiGLU -------------------------------------

RT_AVX512 void RmsForwardAvx512(float* o, bf16_t* oh, float* s, const float* x, const float* w,
                                int64_t N, int64_t C) {
  RmsForwardBody(o, oh, s, x, w, N, C);
}
RT_AVX512 void RmsBackwardAvx512(float* dinp, float* dw, const float* dout, const float* inp,
                                 const float* w, const float* rstd, int64_t N, int64_t C) {
  RmsBackwardBody(dinp, dw, dout, inp, w, rstd, N, C);
}
RT_AVX512 void RopeAvx512(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH,
                          int64_t hs, float sign) {
  RopeBody(qkv, rope, rows, T, NH, hs, sign);
}

// silu(g) * u for one row of F; out_h (optional) gets the bf16 copy.
RT_AVX512 void SwigluRowAvx512(float* o, const float* g, const float* u, int64_t F) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < F; j += 16) {
    const __mmask16 k = TailMask(F - j);
    const __m512 x = _mm512_maskz_loadu_ps(k, g + j);
    const __m512 silu =
        _mm512_div_ps(x, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(k, u + j)));
  }
}
void SwigluRowGeneric(float* o, const float* g, const float* u, int64_t F) {
  for (int64_t j = 0; j < F; ++j) o[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
}

// dgate = dout u silu'(g), dup = dout silu(g) with silu' = s (1 + g (1 - s)), s = sigmoid.
RT_AVX512 void SwigluBackRowAvx512(float* dg, float* du, const float* d, const float* g,
                                   const float* u, int64_t F) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < F; j += 16) {
    const __mmask16 k = TailMask(F - j);
    const __m512 x = _mm512_maskz_loadu_ps(k, g + j);
    const __m512 dy = _mm512_maskz_loadu_ps(k, d + j);
    const __m512 sg =
        _mm512_div_ps(one, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    const __m512 silu = _mm512_mul_ps(x, sg);
    const __m512 dsilu = _mm512_mul_ps(sg, _mm512_fmadd_ps(x, _mm512_sub_ps(one, sg), one));
    _mm512_mask_storeu_ps(dg + j, k,
                          _mm512_mul_ps(_mm512_mul_ps(dy, _mm512_maskz_loadu_ps(k, u + j)), dsilu));
    _mm512_mask_storeu_ps(du + j, k, _mm512_mul_ps(dy, silu));
  }
}
void SwigluBackRowGeneric(float* dg, float* du, const float* d, const float* g, const float* u,
                          int64_t F) {
  for (int64_t j = 0; j < F; ++j) {
    const float sg = 1.0f / (1.0f + std::exp(-g[j]));
    dg[j] = d[j] * u[j] * (sg * (g[j] * (1.0f - sg) + 1.0f));
    du[j] = d[j] * (g[j] * sg);
  }
}

// ---- causal softmax ----------------------------------------------------------------

RT_AVX512 void SoftmaxRowAvx512(float* a, int64_t n, int64_t T, float scale) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, a + j));
  }
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax) * scale);
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    __m512 e = Exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, a + j), vs, m));
    e = _mm512_maskz_mov_ps(k, e);
    vsum = _mm512_add_ps(vsum, e);
    _mm512_mask_storeu_ps(a + j, k, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vsum));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    _mm512_mask_storeu_ps(a + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + j), inv));
  }
  for (int64_t j = n; j < T; ++j) a[j] = 0.0f;
}

void SoftmaxRowGeneric(float* a, int64_t n, int64_t T, float scale) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, a[j]);
  mx *= scale;
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    a[j] = std::exp(a[j] * scale - mx);
    sum += a[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) a[j] *= inv;
  for (int64_t j = n; j < T; ++j) a[j] = 0.0f;
}

RT_AVX512 void SoftmaxBackRowAvx512(float* d, const float* a, int64_t n, int64_t T, float scale) {
  __m512 vdot = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    vdot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + j), _mm512_maskz_loadu_ps(k, d + j), vdot);
  }
  const __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(vdot));
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = TailMask(n - j);
    const __m512 g = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + j), dot);
    _mm512_mask_storeu_ps(d + j, k,
                          _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, a + j), g), vs));
  }
  for (int64_t j = n; j < T; ++j) d[j] = 0.0f;
}

void SoftmaxBackRowGeneric(float* d, const float* a, int64_t n, int64_t T, float scale) {
  float dot = 0.0f;
  for (int64_t j = 0; j < n; ++j) dot += a[j] * d[j];
  for (int64_t j = 0; j < n; ++j) d[j] = a[j] * (d[j] - dot) * scale;
  for (int64_t j = n; j < T; ++j) d[j] = 0.0f;
}

// ---- cross-entropy -----------------------------------------------------------------

// Returns the row's loss; if backward, replaces the row by gs * (softmax - onehot).
RT_AVX512 double CrossEntropyRowAvx512(float* x, int64_t V, int32_t target, bool backward,
                                       float gs) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < V; j += 16) {
    const __mmask16 k = TailMask(V - j);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, x + j));
  }
  const float mx = _mm512_reduce_max_ps(vmax);
  const __m512 m = _mm512_set1_ps(mx);
  const float xt = x[target];
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t j = 0; j < V; j += 16) {
    const __mmask16 k = TailMask(V - j);
    __m512 e = _mm512_maskz_mov_ps(k, Exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), m)));
    vsum = _mm512_add_ps(vsum, e);
    if (backward) _mm512_mask_storeu_ps(x + j, k, e);
  }
  const float sum = _mm512_reduce_add_ps(vsum);
  if (backward) {
    const __m512 s = _mm512_set1_ps(gs / sum);
    for (int64_t j = 0; j < V; j += 16) {
      const __mmask16 k = TailMask(V - j);
      _mm512_mask_storeu_ps(x + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + j), s));
    }
    x[target] -= gs;
  }
  return std::log(static_cast<double>(sum)) + mx - xt;
}

double CrossEntropyRowGeneric(float* x, int64_t V, int32_t target, bool backward, float gs) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < V; ++j) mx = std::max(mx, x[j]);
  const float xt = x[target];
  float sum = 0.0f;
  for (int64_t j = 0; j < V; ++j) {
    const float e = std::exp(x[j] - mx);
    sum += e;
    if (backward) x[j] = e;
  }
  if (backward) {
    const float s = gs / sum;
    for (int64_t j = 0; j < V; ++j) x[j] *= s;
    x[target] -= gs;
  }
  return std::log(static_cast<double>(sum)) + mx - xt;
}

}  // namespace

// ---- public entry points -----------------------------------------------------------

void LayerNormForward(float* out_f32, bf16_t* out_bf16, float* mean, float* rstd, const float* inp,
                      const float* w, const float* b, int64_t N, int64_t C) {
  if (UseAvx512()) {
    LnForwardAvx512(out_f32, out_bf16, mean, rstd, inp, w, b, N, C);
  } else if (UseAvx2()) {
    avx2::LayerNormForward(out_f32, out_bf16, mean, rstd, inp, w, b, N, C);
  } else {
    LnForwardGeneric(out_f32, out_bf16, mean, rstd, inp, w, b, N, C);
  }
}

void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (UseAvx512()) {
    LnBackwardAvx512(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  } else if (UseAvx2()) {
    avx2::LayerNormBackward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  } else {
    LnBackwardGeneric(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
}

void RmsNormForward(float* out_f32, bf16_t* out_bf16, float* rstd, const float* inp, const float* w,
                    int64_t N, int64_t C) {
  if (UseAvx512()) {
    RmsForwardAvx512(out_f32, out_bf16, rstd, inp, w, N, C);
  } else if (UseAvx2()) {
    avx2::RmsNormForward(out_f32, out_bf16, rstd, inp, w, N, C);
  } else {
    RmsForwardBody(out_f32, out_bf16, rstd, inp, w, N, C);
  }
}

void RmsNormBackward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                     const float* rstd, int64_t N, int64_t C) {
  if (UseAvx512()) {
    RmsBackwardAvx512(dinp, dw, dout, inp, w, rstd, N, C);
  } else if (UseAvx2()) {
    avx2::RmsNormBackward(dinp, dw, dout, inp, w, rstd, N, C);
  } else {
    RmsBackwardBody(dinp, dw, dout, inp, w, rstd, N, C);
  }
}

std::vector<float> RopeTable(int64_t T, int64_t hs, double theta) {
  const int64_t half = hs / 2;
  std::vector<float> table(static_cast<size_t>(T * hs));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(t) * std::pow(theta, -2.0 * static_cast<double>(i) / hs);
      table[t * hs + i] = static_cast<float>(std::cos(angle));
      table[t * hs + half + i] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

namespace {
void Rope(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs,
          float sign) {
  if (UseAvx512()) {
    RopeAvx512(qkv, rope, rows, T, NH, hs, sign);
  } else if (UseAvx2()) {
    avx2::Rope(qkv, rope, rows, T, NH, hs, sign);
  } else {
    RopeBody(qkv, rope, rows, T, NH, hs, sign);
  }
}
}  // namespace

void RopeForward(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs) {
  Rope(qkv, rope, rows, T, NH, hs, 1.0f);
}
void RopeBackward(float* dqkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs) {
  Rope(dqkv, rope, rows, T, NH, hs, -1.0f);
}

void SwigluForward(float* out_f32, bf16_t* out_bf16, const float* fc, int64_t M, int64_t F) {
  const Isa isa = ActiveIsa();
#pragma omp parallel
  {
    std::vector<float> row(out_f32 == nullptr ? F : 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < M; ++r) {
      float* o = out_f32 != nullptr ? out_f32 + r * F : row.data();
      const float* g = fc + r * 2 * F;
      if (isa >= Isa::kAvx512) {
        SwigluRowAvx512(o, g, g + F, F);
      } else if (isa >= Isa::kAvx2) {
        avx2::SwigluRow(o, g, g + F, F);
      } else {
        SwigluRowGeneric(o, g, g + F, F);
      }
      if (out_bf16 != nullptr) FloatToBf16N(o, out_bf16 + r * F, F);
    }
  }
}

void SwigluBackward(float* dfc, const float* dout, const float* fc, int64_t M, int64_t F) {
  const Isa isa = ActiveIsa();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    float* dg = dfc + r * 2 * F;
    const float* g = fc + r * 2 * F;
    if (isa >= Isa::kAvx512) {
      SwigluBackRowAvx512(dg, dg + F, dout + r * F, g, g + F, F);
    } else if (isa >= Isa::kAvx2) {
      avx2::SwigluBackRow(dg, dg + F, dout + r * F, g, g + F, F);
    } else {
      SwigluBackRowGeneric(dg, dg + F, dout + r * F, g, g + F, F);
    }
  }
}

void GeluForward(float* out_f32, bf16_t* out_bf16, const float* inp, int64_t n) {
  if (UseAvx512()) {
    GeluForwardAvx512(out_f32, out_bf16, inp, n);
  } else if (UseAvx2()) {
    avx2::GeluForward(out_f32, out_bf16, inp, n);
  } else {
    GeluForwardGeneric(out_f32, out_bf16, inp, n);
  }
}

void GeluBackward(float* dinout, const float* inp, int64_t n) {
  if (UseAvx512()) {
    GeluBackwardAvx512(dinout, inp, n);
  } else if (UseAvx2()) {
    avx2::GeluBackward(dinout, inp, n);
  } else {
    GeluBackwardGeneric(dinout, inp, n);
  }
}

void CausalSoftmaxForward(float* att, bf16_t* att_bf16, int64_t BH, int64_t T, float scale) {
  const Isa isa = ActiveIsa();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < BH * T; ++r) {
    float* a = att + r * T;
    const int64_t n = r % T + 1;
    if (isa >= Isa::kAvx512) {
      SoftmaxRowAvx512(a, n, T, scale);
    } else if (isa >= Isa::kAvx2) {
      avx2::SoftmaxRow(a, n, T, scale);
    } else {
      SoftmaxRowGeneric(a, n, T, scale);
    }
    if (att_bf16 != nullptr) FloatToBf16N(a, att_bf16 + r * T, T);
  }
}

void CausalSoftmaxBackward(float* datt, bf16_t* dscores_bf16, const float* att, int64_t BH,
                           int64_t T, float scale) {
  const Isa isa = ActiveIsa();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < BH * T; ++r) {
    float* d = datt + r * T;
    const int64_t n = r % T + 1;
    if (isa >= Isa::kAvx512) {
      SoftmaxBackRowAvx512(d, att + r * T, n, T, scale);
    } else if (isa >= Isa::kAvx2) {
      avx2::SoftmaxBackRow(d, att + r * T, n, T, scale);
    } else {
      SoftmaxBackRowGeneric(d, att + r * T, n, T, scale);
    }
    if (dscores_bf16 != nullptr) FloatToBf16N(d, dscores_bf16 + r * T, T);
  }
}

double SoftmaxCrossEntropy(float* logits, bf16_t* dlogits_bf16, const int32_t* targets, int64_t R,
                           int64_t V, bool backward, float grad_scale) {
  const Isa isa = ActiveIsa();
  // Per-row losses summed in row order afterwards, so the total is thread-count independent.
  std::vector<double> row_loss(R);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    float* x = logits + r * V;
    row_loss[r] =
        isa >= Isa::kAvx512 ? CrossEntropyRowAvx512(x, V, targets[r], backward, grad_scale)
        : isa >= Isa::kAvx2 ? avx2::CrossEntropyRow(x, V, targets[r], backward, grad_scale)
                            : CrossEntropyRowGeneric(x, V, targets[r], backward, grad_scale);
    if (backward && dlogits_bf16 != nullptr) FloatToBf16N(x, dlogits_bf16 + r * V, V);
  }
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total;
}

double CrossEntropyRowForTest(const float* row, int64_t V, int32_t target) {
  std::vector<float> copy(row, row + V);
  return CrossEntropyRowGeneric(copy.data(), V, target, false, 0.0f);
}

void EmbeddingForward(float* x, const int32_t* tokens, const float* wte, const float* wpe,
                      int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* e = wte + static_cast<int64_t>(tokens[bt]) * C;
    float* o = x + bt * C;
    if (wpe == nullptr) {
      std::copy(e, e + C, o);
      continue;
    }
    const float* p = wpe + (bt % T) * C;
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) o[i] = e[i] + p[i];
  }
}

void EmbeddingBackward(float* dwte, float* dwpe, const float* dx, const int32_t* tokens, int64_t B,
                       int64_t T, int64_t C) {
  const int64_t chunks = (C + kColChunk - 1) / kColChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t c0 = ch * kColChunk, c1 = std::min(C, c0 + kColChunk);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        const float* d = dx + (b * T + t) * C;
        float* e = dwte + static_cast<int64_t>(tokens[b * T + t]) * C;
        if (dwpe == nullptr) {
#pragma omp simd
          for (int64_t i = c0; i < c1; ++i) e[i] += d[i];
          continue;
        }
        float* p = dwpe + t * C;
#pragma omp simd
        for (int64_t i = c0; i < c1; ++i) {
          e[i] += d[i];
          p[i] += d[i];
        }
      }
    }
  }
}

void BiasBackward(float* db, const float* dout, int64_t M, int64_t N, bf16_t* dout_bf16) {
  if (UseAvx512()) {
    BiasBackwardAvx512(db, dout, M, N, dout_bf16);
  } else if (UseAvx2()) {
    avx2::BiasBackward(db, dout, M, N, dout_bf16);
  } else {
    BiasBackwardBody(db, dout, M, N, dout_bf16);
  }
}

void CopyFloats(float* dst, const float* src, int64_t n) {
  const int64_t chunks = (n + kElemChunk * 16 - 1) / (kElemChunk * 16);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * kElemChunk * 16, i1 = std::min(n, i0 + kElemChunk * 16);
    std::copy(src + i0, src + i1, dst + i0);
  }
}

void ToBf16(bf16_t* dst, const float* src, int64_t n) {
  const int64_t step = kElemChunk * 16;
  const int64_t chunks = (n + step - 1) / step;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * step, i1 = std::min(n, i0 + step);
    FloatToBf16N(src + i0, dst + i0, i1 - i0);
  }
}

}  // namespace rt::model
