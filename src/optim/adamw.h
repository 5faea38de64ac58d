// AdamW (Loshchilov & Hutter): Adam with weight decay decoupled from the gradient.
//
// Works on any flat span of floats: the whole parameter buffer of one peer, or a
// ZeRO-1 shard of it. The moments m and v are owned here and have the same layout
// as the span given to Step() (DESIGN invariant 1), so checkpoints save them as
// flat sections. Elementwise, hence bit-identical for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "core/aligned_buffer.h"

namespace rt::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// [begin, end) float range of a span.
using FloatRange = std::pair<size_t, size_t>;

class AdamW {
 public:
  // `n`: floats in the span this optimizer updates. decay_ranges: [begin,end) ranges of
  // that span that get weight decay (2-D weights and embeddings; not biases or layer
  // norms). Ranges may be unsorted and overlap; a range outside [0,n) is a programming
  // error and aborts with a message.
  AdamW(const AdamWConfig& config, size_t n, std::vector<FloatRange> decay_ranges);

  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update, `t` is the 1-based step count (bias correction). For every i:
  //   g = grad_scale * grads[i]                 (grad_scale carries global-norm clipping)
  //   p *= 1 - lr * weight_decay                (only inside decay ranges)
  //   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
  //   p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
  // params.size() == grads.size() == n. OpenMP-parallel over the span.
  void Step(absl::Span<float> params, absl::Span<const float> grads, float lr, int64_t t,
            float grad_scale = 1.0f);

  // Moments, same layout as the params span (for checkpoints: read or overwrite).
  absl::Span<float> m() { return m_.span(); }
  absl::Span<float> v() { return v_.span(); }
  absl::Span<const float> m() const { return m_.span(); }
  absl::Span<const float> v() const { return v_.span(); }

  size_t size() const { return n_; }
  const AdamWConfig& config() const { return config_; }
  // The merged, sorted decay ranges actually used.
  const std::vector<FloatRange>& decay_ranges() const { return decay_ranges_; }

 private:
  // A contiguous run of the span with one decay setting, small enough to balance threads.
  struct Piece {
    size_t begin, end;
    bool decay;
  };

  AdamWConfig config_;
  size_t n_;
  std::vector<FloatRange> decay_ranges_;
  std::vector<Piece> pieces_;
  AlignedBuffer<float> m_, v_;
};

// The decay ranges of a shard [shard_begin, shard_end) of a buffer whose ranges are
// `full_ranges`, re-based to the shard (for an optimizer that owns only that shard).
std::vector<FloatRange> DecayRangesForShard(const std::vector<FloatRange>& full_ranges,
                                            size_t shard_begin, size_t shard_end);

}  // namespace rt::optim
