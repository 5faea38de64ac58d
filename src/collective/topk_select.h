// Top-k selection with error feedback (Deep Gradient Compression; Stich et al. 2018).
//
// For one bucket: v = grads + residual; choose exactly k entries of largest |v| among
// the entries outside `dense_ranges`, plus every entry inside them (small tensors
// such as biases and LayerNorm gains always travel). Selected entries are sent as
// bf16(v); the residual keeps what was not sent:
//   residual[i] = v[i] - bf16(v[i])  if i was selected   (exact in fp32)
//   residual[i] = v[i]               otherwise
// so for every i, sent[i] + residual[i] == v[i] exactly.
//
// Fast on CPUs: a threshold is estimated from a deterministic sample of |v|, then
// one pass computes v (stored in residual) and collects candidates >= threshold;
// only the few candidates are partially sorted (nth_element) to keep exactly k.
// No full sort. Deterministic: same inputs, same selection (ties at the k-th
// magnitude go to the lowest indices).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/bf16.h"

namespace rt::collective {

struct IndexRange {
  size_t begin = 0, end = 0;  // [begin, end) in floats
};

struct SparseVector {
  std::vector<uint32_t> indices;  // strictly increasing, < length
  std::vector<bf16_t> values;     // same count
};

// Working memory of a selection, kept by a caller that selects again and again (one
// per bucket): vectors built from empty on every call cost page faults each time, as
// the allocator hands freed memory back to the kernel (measured: ~1,750 minor faults,
// about 7 MB, per 16M-float bucket at density 0.001).
struct TopKScratch {
  std::vector<float> sample;     // sampled magnitudes (the threshold)
  std::vector<uint32_t> cand;    // candidate indices
  std::vector<float> cand_mags;  // their magnitudes (the k-th largest)
};

// grads and residual: the same bucket, length < 2^32. dense_ranges: sorted,
// disjoint, within the bucket. k: entries to pick outside dense ranges (clamped to
// their count). Fills *out and updates residual as above. scratch: optional (null =
// allocated for this call).
void SelectTopKWithFeedback(absl::Span<const float> grads, absl::Span<float> residual, size_t k,
                            const std::vector<IndexRange>& dense_ranges, SparseVector* out,
                            TopKScratch* scratch = nullptr);

// k for a density: round(density * sparse_count), at least 1 if sparse_count > 0.
size_t TopKCount(size_t sparse_count, double density);

}  // namespace rt::collective
