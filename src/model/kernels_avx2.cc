// AVX2+FMA kernels (see kernels_avx2.h). The layer norms reuse the shared loop bodies
// (kernels_body.h), vectorised by the compiler for this target; GELU, softmax and
// cross-entropy need exp(), which GCC does not vectorise without -ffast-math, so they
// are written with intrinsics around Exp256. Tails use maskload/maskstore (AVX2 has no
// mask registers): masked lanes read as 0 and are never written.
#include "model/kernels_avx2.h"

#include <immintrin.h>

#include "model/kernels_body.h"

namespace rt::model::avx2 {
namespace {

using namespace kernel_body;

#define RT_AVX2 __attribute__((target("avx2,fma")))

// exp(x) for 8 floats: range reduction x = n ln2 + r (ln2 split in two for accuracy),
// a degree-6 polynomial for e^r, and 2^n built in the exponent bits. The upper clamp
// (88) keeps n <= 127, so 2^n is a normal float (e^88 = 1.65e38 < FLT_MAX); below
// -87.3 the result is the smallest normal's neighbourhood, as in the AVX-512 path.
RT_AVX2 RT_INLINE __m256 Exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
  x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3888889e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333338e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666668e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// All-ones in the first min(left, 8) lanes.
RT_AVX2 RT_INLINE __m256i TailMask(int64_t left) {
  const int k = left >= 8 ? 8 : static_cast<int>(left);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

RT_AVX2 RT_INLINE float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

RT_AVX2 RT_INLINE float ReduceMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Lane sets for loops over n floats: Full for each whole block of 8, Tail (a mask)
// for the last, partial one. Kernels are templates over them, so the main loop uses
// plain loads and stores: vmaskmovps costs more than a plain load or store (here,
// with one on every block, GELU backward, the causal softmax and cross-entropy took
// 1.9-3.4x longer), and its store form is reported slower still on AMD Zen 2/3, the
// CPUs most AVX2 VPSes run (not measured here).
struct Full {};
struct Tail {
  __m256i k;
};

RT_AVX2 RT_INLINE __m256 Load(const float* p, Full) { return _mm256_loadu_ps(p); }
RT_AVX2 RT_INLINE __m256 Load(const float* p, Tail t) { return _mm256_maskload_ps(p, t.k); }
RT_AVX2 RT_INLINE void Store(float* p, __m256 v, Full) { _mm256_storeu_ps(p, v); }
RT_AVX2 RT_INLINE void Store(float* p, __m256 v, Tail t) { _mm256_maskstore_ps(p, t.k, v); }
// Lanes outside the set as 0 (sums) or -inf (maxima).
RT_AVX2 RT_INLINE __m256 ZeroOutside(__m256 v, Full) { return v; }
RT_AVX2 RT_INLINE __m256 ZeroOutside(__m256 v, Tail t) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(t.k));
}
RT_AVX2 RT_INLINE __m256 LoadOrMinusInf(const float* p, Full) { return _mm256_loadu_ps(p); }
RT_AVX2 RT_INLINE __m256 LoadOrMinusInf(const float* p, Tail t) {
  return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(p, t.k),
                          _mm256_castsi256_ps(t.k));
}

// Calls step(j, Full{}) for j = 0, 8, ... while 8 floats remain, then step(j, Tail{...})
// once for the rest (if any). `step` is a functor whose operator() is RT_AVX2.
template <class Step>
RT_AVX2 RT_INLINE void ForEach8(int64_t n, Step& step) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) step(j, Full{});
  if (j < n) step(j, Tail{TailMask(n - j)});
}

// x * sigmoid(2u), u = k (x + c x^3): the tanh-GELU without cancellation for x < 0.
RT_AVX2 RT_INLINE __m256 Gelu8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u =
      _mm256_mul_ps(_mm256_set1_ps(kGeluK), _mm256_fmadd_ps(_mm256_set1_ps(kGeluC), x3, x));
  return _mm256_div_ps(
      x, _mm256_add_ps(_mm256_set1_ps(1.0f), Exp256(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u))));
}

}  // namespace

RT_AVX2 void LayerNormForward(float* o, bf16_t* oh, float* m, float* s, const float* x,
                              const float* w, const float* b, int64_t N, int64_t C) {
  LnForwardBody(o, oh, m, s, x, w, b, N, C);
}

RT_AVX2 void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout,
                               const float* inp, const float* w, const float* mean,
                               const float* rstd, int64_t N, int64_t C) {
  LnBackwardBody(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

RT_AVX2 void BiasBackward(float* db, const float* dout, int64_t M, int64_t N, bf16_t* dout_bf16) {
  BiasBackwardBody(db, dout, M, N, dout_bf16);
}

// o = gelu(x) for 8 floats (or the tail's lanes).
struct GeluStep {
  float* o;
  const float* x;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t i, Lanes lanes) const {
    Store(o + i, Gelu8(Load(x + i, lanes)), lanes);
  }
};

RT_AVX2 void GeluForward(float* out, bf16_t* out_h, const float* inp, int64_t n) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel
  {
    std::vector<float> tmp(out == nullptr ? kElemChunk : 0);
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
      float* o = out != nullptr ? out + i0 : tmp.data();
      GeluStep step{o, inp + i0};
      ForEach8(i1 - i0, step);
      if (out_h != nullptr) FloatToBf16N(o, out_h + i0, i1 - i0);
    }
  }
}

// d *= gelu'(x) for 8 floats (or the tail's lanes).
struct GeluBackStep {
  float* d;
  const float* inp;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t i, Lanes lanes) const {
    const __m256 x = Load(inp + i, lanes);
    const __m256 x2 = _mm256_mul_ps(x, x);
    const __m256 u = _mm256_mul_ps(
        _mm256_set1_ps(kGeluK), _mm256_fmadd_ps(_mm256_set1_ps(kGeluC), _mm256_mul_ps(x2, x), x));
    // y = x s with s = sigmoid(2u): dy/dx = s + 2 x s (1 - s) du/dx, du/dx = k (1 + 3c x^2).
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sg =
        _mm256_div_ps(one, _mm256_add_ps(one, Exp256(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u))));
    const __m256 du = _mm256_mul_ps(_mm256_set1_ps(2.0f * kGeluK),
                                    _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kGeluC), x2, one));
    const __m256 g =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(x, sg), _mm256_sub_ps(one, sg)), du, sg);
    Store(d + i, _mm256_mul_ps(g, Load(d + i, lanes)), lanes);
  }
};

RT_AVX2 void GeluBackward(float* d, const float* inp, int64_t n) {
  const int64_t chunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
    GeluBackStep step{d + i0, inp + i0};
    ForEach8(i1 - i0, step);
  }
}

// Maximum of n floats.
struct MaxStep {
  const float* a;
  __m256 acc = _mm256_set1_ps(-INFINITY);
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) {
    acc = _mm256_max_ps(acc, LoadOrMinusInf(a + j, lanes));
  }
};

// a = exp(a * scale - m), summed (scale 1 for cross-entropy). store = false only sums.
struct ExpSumStep {
  float* a;
  __m256 scale, m;
  bool store;
  __m256 sum = _mm256_setzero_ps();
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) {
    const __m256 e = ZeroOutside(Exp256(_mm256_fmsub_ps(Load(a + j, lanes), scale, m)), lanes);
    sum = _mm256_add_ps(sum, e);
    if (store) Store(a + j, e, lanes);
  }
};

// a *= s.
struct ScaleStep {
  float* a;
  __m256 s;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) const {
    Store(a + j, _mm256_mul_ps(Load(a + j, lanes), s), lanes);
  }
};

// Sum of a * d.
struct DotStep {
  const float* a;
  const float* d;
  __m256 acc = _mm256_setzero_ps();
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) {
    acc = _mm256_fmadd_ps(Load(a + j, lanes), Load(d + j, lanes), acc);
  }
};

// d = a (d - dot) scale.
struct SoftmaxBackStep {
  float* d;
  const float* a;
  __m256 dot, scale;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) const {
    const __m256 g = _mm256_sub_ps(Load(d + j, lanes), dot);
    Store(d + j, _mm256_mul_ps(_mm256_mul_ps(Load(a + j, lanes), g), scale), lanes);
  }
};

RT_AVX2 void SoftmaxRow(float* a, int64_t n, int64_t T, float scale) {
  MaxStep max{a};
  ForEach8(n, max);
  ExpSumStep exp{a, _mm256_set1_ps(scale), _mm256_set1_ps(ReduceMax(max.acc) * scale), true};
  ForEach8(n, exp);
  ScaleStep normalise{a, _mm256_set1_ps(1.0f / ReduceAdd(exp.sum))};
  ForEach8(n, normalise);
  for (int64_t j = n; j < T; ++j) a[j] = 0.0f;
}

RT_AVX2 void SoftmaxBackRow(float* d, const float* a, int64_t n, int64_t T, float scale) {
  DotStep dot{a, d};
  ForEach8(n, dot);
  SoftmaxBackStep back{d, a, _mm256_set1_ps(ReduceAdd(dot.acc)), _mm256_set1_ps(scale)};
  ForEach8(n, back);
  for (int64_t j = n; j < T; ++j) d[j] = 0.0f;
}

RT_AVX2 void RmsNormForward(float* o, bf16_t* oh, float* s, const float* x, const float* w,
                            int64_t N, int64_t C) {
  RmsForwardBody(o, oh, s, x, w, N, C);
}

RT_AVX2 void RmsNormBackward(float* dinp, float* dw, const float* dout, const float* inp,
                             const float* w, const float* rstd, int64_t N, int64_t C) {
  RmsBackwardBody(dinp, dw, dout, inp, w, rstd, N, C);
}

RT_AVX2 void Rope(float* qkv, const float* rope, int64_t rows, int64_t T, int64_t NH, int64_t hs,
                  float sign) {
  RopeBody(qkv, rope, rows, T, NH, hs, sign);
}

// sigmoid(x) for 8 floats.
RT_AVX2 RT_INLINE __m256 Sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// o = silu(g) u.
struct SwigluStep {
  float* o;
  const float* g;
  const float* u;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) const {
    const __m256 x = Load(g + j, lanes);
    Store(o + j, _mm256_mul_ps(_mm256_mul_ps(x, Sigmoid8(x)), Load(u + j, lanes)), lanes);
  }
};

// dg = d u silu'(g), du = d silu(g); silu' = s (1 + g (1 - s)).
struct SwigluBackStep {
  float* dg;
  float* du;
  const float* d;
  const float* g;
  const float* u;
  template <class Lanes>
  RT_AVX2 RT_INLINE void operator()(int64_t j, Lanes lanes) const {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 x = Load(g + j, lanes), dy = Load(d + j, lanes);
    const __m256 sg = Sigmoid8(x);
    const __m256 dsilu = _mm256_mul_ps(sg, _mm256_fmadd_ps(x, _mm256_sub_ps(one, sg), one));
    Store(dg + j, _mm256_mul_ps(_mm256_mul_ps(dy, Load(u + j, lanes)), dsilu), lanes);
    Store(du + j, _mm256_mul_ps(dy, _mm256_mul_ps(x, sg)), lanes);
  }
};

RT_AVX2 void SwigluRow(float* o, const float* g, const float* u, int64_t F) {
  SwigluStep step{o, g, u};
  ForEach8(F, step);
}

RT_AVX2 void SwigluBackRow(float* dg, float* du, const float* d, const float* g, const float* u,
                           int64_t F) {
  SwigluBackStep step{dg, du, d, g, u};
  ForEach8(F, step);
}

RT_AVX2 double CrossEntropyRow(float* x, int64_t V, int32_t target, bool backward, float gs) {
  MaxStep max{x};
  ForEach8(V, max);
  const float mx = ReduceMax(max.acc);
  const float xt = x[target];
  ExpSumStep exp{x, _mm256_set1_ps(1.0f), _mm256_set1_ps(mx), backward};
  ForEach8(V, exp);
  const float sum = ReduceAdd(exp.sum);
  if (backward) {
    ScaleStep scale{x, _mm256_set1_ps(gs / sum)};
    ForEach8(V, scale);
    x[target] -= gs;
  }
  return std::log(static_cast<double>(sum)) + mx - xt;
}

}  // namespace rt::model::avx2
