// ShardedAdamW: AdamW over some ranges of the flat buffer only (ZeRO stage 1, --zero 1).
//
// With --zero 1 each peer of a ring updates only the parameters whose reduced gradient
// it holds after the reduce-scatter (train/gradient_reducer.h OwnedRanges: one piece
// per gradient bucket), and keeps the AdamW moments of those pieces alone: 1/N of the
// moment memory. The update of every element is the one AdamW::Step computes over the
// whole buffer (elementwise, no FMA contraction: optim/adamw.cc), so a sharded run
// gives the same bits as an unsharded one (DESIGN invariant 3).
//
// Layout: the moments of range i are a span of their own; ranges are sorted, disjoint
// and fixed for the optimizer's life (a new ownership is a new ShardedAdamW).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "optim/adamw.h"

namespace rt::optim {

class ShardedAdamW {
 public:
  // ranges: [begin, end) floats of the full buffer this optimizer updates; sorted,
  // disjoint, within [0, full_floats). full_decay_ranges: the decay ranges of the full
  // buffer (AdamW's). A range out of order or out of bounds is a programming error
  // and aborts with a message.
  ShardedAdamW(const AdamWConfig& config, size_t full_floats, std::vector<FloatRange> ranges,
               const std::vector<FloatRange>& full_decay_ranges);

  // AdamW::Step on every owned range of the full-buffer spans (params.size() ==
  // grads.size() == full_floats); elements outside the ranges are not read or written.
  void Step(absl::Span<float> params, absl::Span<const float> grads, float lr, int64_t t,
            float grad_scale = 1.0f);

  // Step in two halves (AdamW::StageParams / UpdateMoments; together Step's bits), with
  // the gradient of the ranges packed: range after range, owned_floats() floats
  // (PackGrads). StageParams writes the updated parameters of the ranges into
  // params_out (full_floats(); elsewhere untouched) and changes nothing of this
  // optimizer; UpdateMoments then moves the moments on with the same packed gradient.
  void PackGrads(absl::Span<const float> grads, absl::Span<float> packed) const;
  void StageParams(absl::Span<const float> params, absl::Span<const float> packed_grads,
                   absl::Span<float> params_out, float lr, int64_t t, float grad_scale) const;
  void UpdateMoments(absl::Span<const float> packed_grads, float grad_scale);

  // The index of the range that holds float `offset` of the full buffer, -1 if none.
  int RangeAt(size_t offset) const;

  const std::vector<FloatRange>& ranges() const { return ranges_; }
  size_t full_floats() const { return full_floats_; }
  size_t owned_floats() const { return owned_floats_; }  // the sum of the ranges' lengths
  // The optimizer of range i (its moments: m(), v(); the range's length).
  AdamW& shard(size_t i) { return *shards_[i]; }
  const AdamW& shard(size_t i) const { return *shards_[i]; }

 private:
  size_t full_floats_;
  size_t owned_floats_ = 0;
  std::vector<FloatRange> ranges_;
  std::vector<std::unique_ptr<AdamW>> shards_;
};

}  // namespace rt::optim
