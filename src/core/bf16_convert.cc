// Bulk bf16 conversions: AVX-512-BF16 (vcvtne2ps2bf16), AVX-512 or AVX2 integer
// rounding, or scalar, by ActiveIsa(). Every path gives the same bits (round to
// nearest even, NaN kept quiet), so codecs on mixed fleets agree.
#include "core/bf16_convert.h"

// GCC 12 reports false -Wmaybe-uninitialized inside immintrin.h when AVX-512 comes
// from target attributes rather than -m flags (_mm512_undefined_* placeholders).
#if !defined(__clang__)  // clang has no -Wmaybe-uninitialized (and no false report here)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include "core/cpu_features.h"

namespace rt {
namespace {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"))) void ToBf16Avx512Bf16(
    const float* src, bf16_t* dst, size_t n) {
  // vcvtne2ps2bf16 treats subnormal inputs as zero; the other paths round them. Blocks
  // holding one (never in practice: |x| < 1.2e-38) take the scalar rounding, so every
  // path gives the same bits.
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i smallest_normal = _mm512_set1_epi32(0x00800000);
  const __m512i one = _mm512_set1_epi32(1);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 lo = _mm512_loadu_ps(src + i);
    __m512 hi = _mm512_loadu_ps(src + i + 16);
    // (|u| - 1) < 0x007fffff unsigned: exactly the nonzero subnormals.
    const __m512i alo = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(lo), abs_mask), one);
    const __m512i ahi = _mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(hi), abs_mask), one);
    const __mmask16 sub = _mm512_cmplt_epu32_mask(alo, _mm512_sub_epi32(smallest_normal, one)) |
                          _mm512_cmplt_epu32_mask(ahi, _mm512_sub_epi32(smallest_normal, one));
    if (sub != 0) {
      for (size_t j = i; j < i + 32; ++j) dst[j] = FloatToBf16(src[j]);
      continue;
    }
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

// AVX2: the same integer rounding as ToBf16Avx512, 16 floats per iteration; packus
// interleaves the 128-bit halves of its inputs, permute4x64 puts them back in order.
//
// Eight floats rounded to bf16, in the low 16 bits of each lane.
__attribute__((target("avx2"))) inline __m256i RoundToBf16Avx2(const float* p) {
  const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(p));
  // |u| > inf as signed ints (both non-negative after the mask): NaN, kept quiet.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
}

__attribute__((target("avx2"))) void ToBf16Avx2(const float* src, bf16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i packed =
        _mm256_packus_epi32(RoundToBf16Avx2(src + i), RoundToBf16Avx2(src + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
  for (; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

__attribute__((target("avx2"))) void ToFloatAvx2(const bf16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
  }
  for (; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

}  // namespace

void FloatToBf16N(const float* src, bf16_t* dst, size_t n) {
  const Isa isa = ActiveIsa();
  if (isa >= Isa::kAvx512Bf16) {
    ToBf16Avx512Bf16(src, dst, n);
  } else if (isa >= Isa::kAvx512) {
    ToBf16Avx512(src, dst, n);
  } else if (isa >= Isa::kAvx2) {
    ToBf16Avx2(src, dst, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
  }
}

void Bf16ToFloatN(const bf16_t* src, float* dst, size_t n) {
  const Isa isa = ActiveIsa();
  if (isa >= Isa::kAvx512) {
    ToFloatAvx512(src, dst, n);
  } else if (isa >= Isa::kAvx2) {
    ToFloatAvx2(src, dst, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
  }
}

}  // namespace rt
