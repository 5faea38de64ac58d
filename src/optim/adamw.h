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

  // Step in two halves, for a step that must stay undoable until the ring has it
  // (ZeRO-1, train/trainer.cc): StageParams writes to params_out what Step would leave
  // in params, changing nothing else; UpdateMoments, called later with the same grads
  // and grad_scale, leaves m and v as Step would. Together they give Step's bits (the
  // same expressions in the same order, no FMA contraction). params_out may not
  // overlap params or grads; all spans have size() floats.
  void StageParams(absl::Span<const float> params, absl::Span<const float> grads,
                   absl::Span<float> params_out, float lr, int64_t t,
                   float grad_scale = 1.0f) const;
  void UpdateMoments(absl::Span<const float> grads, float grad_scale = 1.0f);

  // ---- Preconditioned steps: top-k with error feedback (collective/bucket_exchange.h) ----
  // Error feedback conserves the SUM of the gradient a peer has not sent yet, but Adam
  // divides every coordinate by its own sqrt(v): a residual gathered over c steps and
  // sent at once enters v too and moves the weight about as far as one dense step, so
  // sparse coordinates learn up to c times slower (measured: top-k 1% ended 5-7% above
  // dense at 300 steps). Instead, after `frozen_t` dense steps the second moment stays
  // as it was (as in 1-bit Adam, Tang et al. 2021), each peer divides ITS OWN gradient
  // by the frozen denominators before compression (Precondition), so top-k ranks
  // coordinates by how far they would move their weight and error feedback conserves
  // movement, and the summed result is applied with momentum only (StepPreconditioned).
  //
  // The denominators of the update after step frozen_t: for coordinate i in block
  // k = i / kPreconditionBlock of the span,
  //   d_i = max(sqrt(v_i / (1-b2^frozen_t)), kPreconditionFloor * rms_k) + eps,
  //   rms_k = sqrt(mean of v_j / (1-b2^frozen_t) over block k)
  // (the floor keeps a coordinate whose gradient was small during the dense steps from
  // turning a later, larger gradient into a jump that error feedback then repeats). Computed from v
  // on every call, so a state loaded or fetched from another peer needs no extra step. Both calls
  // are deterministic; Precondition only reads the optimizer (any thread, while no Step runs).
  // Measured on the 3-peer learning curves (top-k 1%, gap to dense at step 300): floor
  // 0.1 x the RMS of 4096-float blocks was +5.1% already at step 100 (coordinates with a
  // small v jumped; run stopped there); of 1M-float blocks: 0.1 x +3.6%, 0.3 x +2.8%,
  // 1 x +3.7%, 3 x +5.3% (too uniform: Adam's per-coordinate scaling is lost).
  static constexpr size_t kPreconditionBlock = size_t{1} << 20;
  static constexpr float kPreconditionFloor = 0.3f;
  // grads: gradient entries [offset, offset + grads.size()) of the span, divided in place.
  void Precondition(absl::Span<float> grads, size_t offset, int64_t frozen_t) const;
  // One update from preconditioned, summed gradients. For every i:
  //   (only when t == frozen_t + 1, the first such step: m_i /= d_i, so the momentum
  //    gathered by the dense steps continues in preconditioned units)
  //   p *= 1 - lr * weight_decay (inside decay ranges);  m = b1 m + (1-b1) g;
  //   p -= lr / (1-b1^t) * m.
  // v stays frozen, except inside `dense_sums`: ranges whose sum of this step covers
  // every coordinate (exchanged dense or bf16, not top-k: an exact gradient, not a
  // sparse, delayed one), where v goes on learning from the
  // gradient the peers summed, r_i = g_i * d_i (d_i from v before this update), and
  // the coordinate takes exactly Adam's step, with Adam's denominator
  // a_i = sqrt(v_i / (1-b2^frozen_t)) + eps (no block floor: v has just learned r_i,
  // which bounds the step as in Adam):
  //   v_i = b2 v_i + (1-b2) * (1-b2^frozen_t) * r_i^2;
  //   m_i *= d_i / a_i(new v)    (Adam's m / a_i for this step's update);
  //   g_i = r_i / a_i(new v);  the update above;
  //   m_i *= a_i(new v) / d_i(new v)   (back to the floored units)
  // (v keeps the scale of the dense steps' biased estimate, so d_i's formula and the
  // frozen coordinates do not change; |g_i| <= 1 / sqrt(1-b2) however large r_i is,
  // the self-normalisation that keeps Adam stable through a gradient spike, which a
  // denominator from the previous step's v does not give). grads is rewritten there.
  // Between steps m is thus always in the floored units d_i of the current v, the
  // units every top-k step reads it in, whichever codec each range had before: a range
  // that goes from a dense sum back to top-k (the dense first steps of the density
  // ramp, `auto` re-planning a bucket) carries its momentum over exactly
  // (tests/optim/adamw_preconditioned_test.cc; kept in Adam's units a_i instead, the
  // floored coordinates' momentum was overstated by d_i / a_i).
  // Measured (3 peers, small series, 3,000 steps, bf16 wire through this path from step
  // 300): floor kept and m not rescaled +0.68% above dense; floor dropped +0.28%; with
  // Adam's denominator and m in its units -0.03% (plain bf16 -0.02%).
  // Ranges: sorted, disjoint, within the span.
  // No clipping: a global norm of preconditioned values has no fixed scale (measured:
  // plain AdamW with --clip 0 ends 2.5% above --clip 1 on that series; the bounded g_i
  // above stands in for it, and the dense-path run above matches the clipped one).
  //
  // `refreshed`: ranges whose sum was exact (a top-k refresh step, --topk-refresh) but
  // whose coordinates keep top-k's floored step: the update above as for top-k, then v
  // learns from the exact gradient r_i = g_i * d_i (d_i as every peer divided by) and
  // m goes from the old denominators' units to those of the v just learned, floors
  // included (m_i *= d_i(old) / d_i(new)), so the next top-k steps read it right.
  // Taking Adam's unfloored step there instead (as for `dense_sums`) turned top-k's
  // sparse, burst-fed momentum of floored coordinates into jumps: measured on the
  // small series (3 peers, topk:0.01, a refresh every 10 steps) the loss went from 5.05
  // to 7.5 within 40 steps of the first refresh.
  // Both lists: sorted, disjoint, and disjoint from each other.
  void StepPreconditioned(absl::Span<float> params, absl::Span<float> grads, float lr, int64_t t,
                          int64_t frozen_t, const std::vector<FloatRange>& dense_sums = {},
                          const std::vector<FloatRange>& refreshed = {});

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
  // What Step and StageParams compute once per step: lr / (1-b1^t), 1 / sqrt(1-b2^t)
  // and the weight decay factor 1 - lr * weight_decay.
  struct StepScalars {
    float step_size, inv_sqrt_bc2, decay_factor;
  };
  StepScalars ScalarsOf(float lr, int64_t t) const;
  // kPreconditionFloor * rms of v / (1-b2^frozen_t) over the block starting at `block`.
  float BlockFloor(size_t block, float inv_bc2) const;
  // StepPreconditioned's update of v inside `ranges` (sorted, disjoint), of m into
  // Adam's units for this step, and of those gradients (see there).
  void LearnDenseV(absl::Span<float> grads, int64_t frozen_t,
                   const std::vector<FloatRange>& ranges);
  // StepPreconditioned's `refreshed` ranges, after the update (see there).
  void LearnRefreshedV(absl::Span<const float> grads, int64_t frozen_t,
                       const std::vector<FloatRange>& ranges);
  // After the update: m inside `ranges` from Adam's units a_i to the floored ones d_i
  // of the v just learned.
  void RefloorMomentum(int64_t frozen_t, const std::vector<FloatRange>& ranges);

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
