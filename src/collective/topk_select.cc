// Top-k with error feedback: sampled threshold, one fused pass, exact k among candidates.
#include "collective/topk_select.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/cpu_features.h"

namespace rt::collective {
namespace {

// The sparse part of [0, n): the complement of the dense ranges.
std::vector<IndexRange> Complement(size_t n, const std::vector<IndexRange>& dense) {
  std::vector<IndexRange> out;
  size_t pos = 0;
  for (const IndexRange& d : dense) {
    if (d.begin > pos) out.push_back({pos, d.begin});
    pos = std::max(pos, d.end);
  }
  if (pos < n) out.push_back({pos, n});
  return out;
}

// Sampled entries are read in runs of this many consecutive ones (a cache line of
// floats) when the array is large enough. One entry at a time, the 400,000 samples that
// density 0.001 takes of 16M floats each touched its own cache line of both arrays, 40%
// of all their lines, and made selection slower than at density 0.003 (19.9 against
// 13.8 ms): the CPU cost of top-k 0.1% was mostly the sample.
constexpr size_t kSampleRun = 16;

// The magnitude threshold expected to let about `want` of `count` sparse entries
// through, from a sample of |grads + residual| at deterministic positions. Only the
// time of the selection depends on it: the caller keeps exactly k whatever it is.
float SampledThreshold(absl::Span<const float> grads, absl::Span<const float> residual,
                       const std::vector<IndexRange>& sparse, size_t count, double want,
                       std::vector<float>* sample) {
  const double fraction = want / static_cast<double>(count);
  if (fraction >= 1) return 0.0f;
  // Enough samples that ~400 land above the threshold, within bounds.
  size_t samples = static_cast<size_t>(std::min(4e6, std::max(16384.0, 400.0 / fraction)));
  samples = std::min(samples, count);
  const size_t run = count >= kSampleRun * samples ? kSampleRun : 1;
  const size_t runs = samples / run;
  std::vector<float>& mags = *sample;
  mags.clear();
  mags.reserve(runs * run);
  uint64_t state = 0x9E3779B97F4A7C15ull;  // fixed seed: deterministic
  // Run r starts in [r * stride, (r + 1) * stride - run]: runs never overlap and
  // positions only grow, as the walk over the sparse ranges below needs.
  const double stride = static_cast<double>(count) / static_cast<double>(runs);
  size_t range = 0, range_start = 0;  // position of sparse[range] in the sparse numbering
  for (size_t r = 0; r < runs; ++r) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double jitter = static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
    const size_t start =
        std::min(count - run, static_cast<size_t>(static_cast<double>(r) * stride +
                                                  jitter * (stride - static_cast<double>(run))));
    for (size_t pos = start; pos < start + run; ++pos) {
      while (pos >= range_start + sparse[range].end - sparse[range].begin) {
        range_start += sparse[range].end - sparse[range].begin;
        ++range;
      }
      const size_t i = sparse[range].begin + (pos - range_start);
      mags.push_back(std::fabs(grads[i] + residual[i]));
    }
  }
  const size_t taken = mags.size();
  size_t above = static_cast<size_t>(std::ceil(fraction * static_cast<double>(taken)));
  above = std::clamp<size_t>(above, 1, taken);
  std::nth_element(mags.begin(), mags.begin() + (above - 1), mags.end(), std::greater<float>());
  return mags[above - 1];
}

// The scalar loop of CollectCandidates over [i, e): the vector kernels' tails.
size_t CollectTail(const float* g, float* res, size_t i, size_t e, float threshold, bool fuse,
                   uint32_t* out, size_t c) {
  for (; i < e; ++i) {
    float v = res[i];
    if (fuse) res[i] = v = g[i] + v;
    out[c] = static_cast<uint32_t>(i);
    c += std::fabs(v) >= threshold;
  }
  return c;
}

// AVX-512 kernel of CollectCandidates for one block [b, e): 16 lanes compare at
// once and matching indices are compress-stored. Same output as the scalar loop.
__attribute__((target("avx512f"))) size_t CollectBlockAvx512(const float* g, float* res, size_t b,
                                                             size_t e, float threshold, bool fuse,
                                                             uint32_t* out, size_t c) {
  const __m512 thr = _mm512_set1_ps(threshold);
  const __m512i step = _mm512_set1_epi32(16);
  __m512i idx =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(b)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  size_t i = b;
  for (; i + 16 <= e; i += 16) {
    __m512 v = _mm512_loadu_ps(res + i);
    if (fuse) {
      v = _mm512_add_ps(_mm512_loadu_ps(g + i), v);
      _mm512_storeu_ps(res + i, v);
    }
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(v), thr, _CMP_GE_OQ);
    if (m) {
      _mm512_mask_compressstoreu_epi32(out + c, m, idx);
      c += static_cast<size_t>(__builtin_popcount(m));
    }
    idx = _mm512_add_epi32(idx, step);
  }
  return CollectTail(g, res, i, e, threshold, fuse, out, c);
}

// AVX2 kernel of CollectCandidates: 8 lanes compare at once; AVX2 has no compress
// store, so the matching lanes' indices are written one by one from the movemask
// (a few percent of lanes match at top-k densities). Same output as the scalar loop.
__attribute__((target("avx2,bmi"))) size_t CollectBlockAvx2(const float* g, float* res, size_t b,
                                                            size_t e, float threshold, bool fuse,
                                                            uint32_t* out, size_t c) {
  const __m256 thr = _mm256_set1_ps(threshold);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  size_t i = b;
  for (; i + 8 <= e; i += 8) {
    __m256 v = _mm256_loadu_ps(res + i);
    if (fuse) {
      v = _mm256_add_ps(_mm256_loadu_ps(g + i), v);
      _mm256_storeu_ps(res + i, v);
    }
    unsigned m = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(v, abs_mask), thr, _CMP_GE_OQ)));
    while (m != 0) {
      out[c++] = static_cast<uint32_t>(i + static_cast<size_t>(__builtin_ctz(m)));
      m &= m - 1;
    }
  }
  return CollectTail(g, res, i, e, threshold, fuse, out, c);
}

// Appends to *cand every index in `r` with |v| >= threshold; if `fuse`, first
// computes v = grads + residual into residual. Branch-free inner loop.
void CollectCandidates(absl::Span<const float> grads, absl::Span<float> residual, IndexRange r,
                       float threshold, bool fuse, std::vector<uint32_t>* cand, size_t* count) {
  constexpr size_t kBlock = 4096;
  float* res = residual.data();
  const float* g = grads.data();
  for (size_t b = r.begin; b < r.end; b += kBlock) {
    const size_t e = std::min(r.end, b + kBlock);
    if (cand->size() < *count + kBlock) cand->resize(std::max(cand->size() * 2, *count + kBlock));
    uint32_t* out = cand->data();
    size_t c = *count;
    const Isa isa = ActiveIsa();
    if (isa >= Isa::kAvx512) {
      *count = CollectBlockAvx512(g, res, b, e, threshold, fuse, out, c);
      continue;
    }
    if (isa >= Isa::kAvx2) {
      *count = CollectBlockAvx2(g, res, b, e, threshold, fuse, out, c);
      continue;
    }
    if (fuse) {
      for (size_t i = b; i < e; ++i) {
        const float v = g[i] + res[i];
        res[i] = v;
        out[c] = static_cast<uint32_t>(i);
        c += std::fabs(v) >= threshold;
      }
    } else {
      for (size_t i = b; i < e; ++i) {
        out[c] = static_cast<uint32_t>(i);
        c += std::fabs(res[i]) >= threshold;
      }
    }
    *count = c;
  }
}

}  // namespace

size_t TopKCount(size_t sparse_count, double density) {
  if (sparse_count == 0) return 0;
  size_t k = static_cast<size_t>(std::llround(density * static_cast<double>(sparse_count)));
  return std::clamp<size_t>(k, 1, sparse_count);
}

void SelectTopKWithFeedback(absl::Span<const float> grads, absl::Span<float> residual, size_t k,
                            const std::vector<IndexRange>& dense_ranges, SparseVector* out,
                            TopKScratch* scratch) {
  TopKScratch local;
  if (scratch == nullptr) scratch = &local;
  const size_t n = grads.size();
  const std::vector<IndexRange> sparse = Complement(n, dense_ranges);
  size_t sparse_count = 0;
  for (const IndexRange& r : sparse) sparse_count += r.end - r.begin;
  k = std::min(k, sparse_count);

  // Dense ranges: v = g + r, all selected.
  for (const IndexRange& d : dense_ranges) {
    for (size_t i = d.begin; i < d.end; ++i) residual[i] += grads[i];
  }

  // Candidates: aim 20% above k so one pass almost always suffices; if the sample
  // was unlucky, lower the threshold and pass again over the stored v.
  std::vector<uint32_t>& cand = scratch->cand;
  size_t count = 0;
  if (k > 0) {
    const double want = 1.2 * static_cast<double>(k) + 16;
    float threshold =
        SampledThreshold(grads, residual, sparse, sparse_count, want, &scratch->sample);
    for (const IndexRange& r : sparse) {
      CollectCandidates(grads, residual, r, threshold, true, &cand, &count);
    }
    for (int retry = 1; count < k; ++retry) {
      if (threshold == 0.0f) {  // only NaNs are left out: send fewer than k
        k = count;
        break;
      }
      threshold = retry >= 4 ? 0.0f : threshold * 0.5f;
      count = 0;
      for (const IndexRange& r : sparse) {
        CollectCandidates(grads, residual, r, threshold, false, &cand, &count);
      }
    }
  } else {
    for (const IndexRange& r : sparse) {
      for (size_t i = r.begin; i < r.end; ++i) residual[i] += grads[i];
    }
  }
  cand.resize(count);

  // Exactly k: the k-th largest magnitude among candidates, then keep candidates
  // above it and, in index order, as many equal to it as needed.
  if (count > k && k > 0) {
    std::vector<float>& mags = scratch->cand_mags;
    mags.resize(count);
    for (size_t j = 0; j < count; ++j) mags[j] = std::fabs(residual[cand[j]]);
    std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(), std::greater<float>());
    const float kth = mags[k - 1];
    size_t above = 0;
    for (size_t j = 0; j < count; ++j) above += std::fabs(residual[cand[j]]) > kth;
    size_t ties_left = k - above, kept = 0;
    for (size_t j = 0; j < count; ++j) {
      const float m = std::fabs(residual[cand[j]]);
      if (m > kth || (m == kth && ties_left > 0)) {
        if (m == kth) --ties_left;
        cand[kept++] = cand[j];
      }
    }
    cand.resize(kept);
  }

  // Merge with the dense ranges (both in index order), emit bf16, update residual.
  out->indices.clear();
  out->values.clear();
  size_t dense_count = 0;
  for (const IndexRange& d : dense_ranges) dense_count += d.end - d.begin;
  out->indices.reserve(cand.size() + dense_count);
  out->values.reserve(cand.size() + dense_count);
  auto emit = [&](uint32_t i) {
    const bf16_t q = FloatToBf16(residual[i]);
    out->indices.push_back(i);
    out->values.push_back(q);
    residual[i] -= Bf16ToFloat(q);  // exact: v - bf16(v) fits in fp32
  };
  size_t j = 0;
  for (const IndexRange& d : dense_ranges) {
    while (j < cand.size() && cand[j] < d.begin) emit(cand[j++]);
    for (size_t i = d.begin; i < d.end; ++i) emit(static_cast<uint32_t>(i));
  }
  while (j < cand.size()) emit(cand[j++]);
}

}  // namespace rt::collective
