// Bulk bf16 conversions: AVX-512-BF16 (vcvtne2ps2bf16), AVX-512 integer rounding, or scalar.
#include "core/bf16_convert.h"

// GCC 12 reports false -Wmaybe-uninitialized inside immintrin.h when AVX-512 comes
// from target attributes rather than -m flags (_mm512_undefined_* placeholders).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/cpu_features.h"

namespace rt {
namespace {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void ToBf16Avx512Bf16(
    const float* src, bf16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 lo = _mm512_loadu_ps(src + i);
    __m512 hi = _mm512_loadu_ps(src + i + 16);
    __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(reinterpret_cast<void*>(dst + i), reinterpret_cast<__m512i>(packed));
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void ToBf16Avx512(const float* src,
                                                                                bf16_t* dst,
                                                                                size_t n) {
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src + i));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, lsb));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void ToFloatAvx512(const bf16_t* src,
                                                                                 float* dst,
                                                                                 size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i h =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
  for (; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

}  // namespace

void FloatToBf16N(const float* src, bf16_t* dst, size_t n) {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512_bf16) {
    ToBf16Avx512Bf16(src, dst, n);
  } else if (f.avx512) {
    ToBf16Avx512(src, dst, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
  }
}

void Bf16ToFloatN(const bf16_t* src, float* dst, size_t n) {
  if (GetCpuFeatures().avx512) {
    ToFloatAvx512(src, dst, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
  }
}

}  // namespace rt
