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

// The threshold comes from a sample of |grads + residual| at deterministic positions of
// the sparse part. Let p = k / count be the kept fraction, m the sample size and v_k the
// k-th largest magnitude of the whole part. The number X of sampled entries >= v_k is
// about Binomial(m, p), mean lambda = m p. With the a-th largest sampled magnitude as the
// threshold, one pass finds at least k candidates unless X >= a; taking
// a = lambda + 4 sqrt(lambda) + 1 makes that a 4-sigma event (at small lambda the Poisson
// tail: below 3e-4 for lambda >= 1), and the pass then keeps about
// k (1 + 4 / sqrt(lambda)) candidates. A larger sample buys fewer surplus candidates; its
// own cost is reading m entries and an nth_element over them. So m is 1/64 of the part,
// within [16384, 65536]: at most a few percent of the pass over the bucket. The rule
// before, 400 / p entries (333,000 at density 0.001), cost more than that pass: at 4M
// floats, density 0.001, selection took twice as long (`bench codec`).
// Whatever the threshold, the caller keeps exactly k: only the time depends on it.
constexpr size_t kMinSamples = 16384;
constexpr size_t kMaxSamples = 65536;
constexpr double kMarginSigmas = 4;  // z above

// Sampled entries are read in runs of this many consecutive ones (a cache line of
// floats) when the array is large enough: one entry at a time, each sample touches its own
// cache line of both arrays.
constexpr size_t kSampleRun = 16;

// Fills *mags with |grads + residual| at about `samples` deterministic positions of the
// sparse part (`count` entries in all): run r starts at a jittered offset in its own
// stride, so runs never overlap and positions only grow.
void TakeSample(absl::Span<const float> grads, absl::Span<const float> residual,
                const std::vector<IndexRange>& sparse, size_t count, size_t samples,
                std::vector<float>* mags) {
  const size_t run = count >= kSampleRun * samples ? kSampleRun : 1;
  const size_t runs = samples / run;
  mags->clear();
  mags->reserve(runs * run);
  uint64_t state = 0x9E3779B97F4A7C15ull;  // fixed seed: deterministic
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
      mags->push_back(std::fabs(grads[i] + residual[i]));
    }
  }
}

// The sample and the rank of the threshold in it, for one selection of k of `count`.
class SampledThreshold {
 public:
  SampledThreshold(absl::Span<const float> grads, absl::Span<const float> residual,
                   const std::vector<IndexRange>& sparse, size_t count, size_t k,
                   std::vector<float>* sample)
      : mags_(*sample) {
    const double p = static_cast<double>(k) / static_cast<double>(count);
    const size_t wanted = std::clamp(count / 64, kMinSamples, kMaxSamples);
    TakeSample(grads, residual, sparse, count, std::min(count, wanted), &mags_);
    const size_t taken = mags_.size();
    if (taken == count) {
      rank_ = k;  // the whole part: its k-th largest is v_k itself
    } else {
      const double lambda = p * static_cast<double>(taken);
      rank_ = static_cast<size_t>(std::ceil(lambda + kMarginSigmas * std::sqrt(lambda) + 1));
    }
    if (rank_ >= taken) {  // p near 1: as good as everything
      rank_ = taken;
      all_ = true;
      return;
    }
    rank_ = std::max<size_t>(rank_, 1);
    std::nth_element(mags_.begin(), mags_.begin() + (rank_ - 1), mags_.end(),
                     std::greater<float>());
  }

  float threshold() const { return all_ ? 0.0f : mags_[rank_ - 1]; }

  // After a pass that found fewer than k: the sample's magnitude 4 times further down
  // (the sample was unlucky, or neighbours alike made X spread more than a binomial's),
  // then 0 (everything but NaN passes) once the sample is used up.
  float Lower() {
    const size_t taken = mags_.size();
    if (all_ || rank_ >= taken) return 0.0f;
    const size_t next = std::min(taken, rank_ * 4);
    // [0, rank_) already holds the rank_ largest: order only the rest.
    std::nth_element(mags_.begin() + rank_, mags_.begin() + (next - 1), mags_.end(),
                     std::greater<float>());
    rank_ = next;
    return mags_[rank_ - 1];
  }

 private:
  std::vector<float>& mags_;
  size_t rank_ = 1;   // 1 = the largest sampled magnitude
  bool all_ = false;  // threshold 0: every entry is a candidate
};

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

  // Candidates: a threshold from a sample (SampledThreshold) that lets a little more
  // than k through in one pass; if the sample was unlucky, lower it and pass again
  // over the stored v.
  std::vector<uint32_t>& cand = scratch->cand;
  size_t count = 0;
  if (k > 0) {
    SampledThreshold sampled(grads, residual, sparse, sparse_count, k, &scratch->sample);
    float threshold = sampled.threshold();
    for (const IndexRange& r : sparse) {
      CollectCandidates(grads, residual, r, threshold, true, &cand, &count);
    }
    while (count < k) {
      if (threshold == 0.0f) {  // only NaNs are left out: send fewer than k
        k = count;
        break;
      }
      threshold = sampled.Lower();
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
