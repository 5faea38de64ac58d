// AdamW over owned ranges of the flat buffer (see sharded_adamw.h).
#include "optim/sharded_adamw.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace rt::optim {

ShardedAdamW::ShardedAdamW(const AdamWConfig& config, size_t full_floats,
                           std::vector<FloatRange> ranges,
                           const std::vector<FloatRange>& full_decay_ranges)
    : full_floats_(full_floats), ranges_(std::move(ranges)) {
  size_t previous_end = 0;
  for (const FloatRange& r : ranges_) {
    if (r.first < previous_end || r.first > r.second || r.second > full_floats_) {
      std::fprintf(stderr,
                   "ShardedAdamW: range [%zu, %zu) is out of order or outside the buffer of %zu "
                   "floats\n",
                   r.first, r.second, full_floats_);
      std::abort();
    }
    previous_end = r.second;
    owned_floats_ += r.second - r.first;
    shards_.push_back(std::make_unique<AdamW>(
        config, r.second - r.first, DecayRangesForShard(full_decay_ranges, r.first, r.second)));
  }
}

void ShardedAdamW::Step(absl::Span<float> params, absl::Span<const float> grads, float lr,
                        int64_t t, float grad_scale) {
  if (params.size() != full_floats_ || grads.size() != full_floats_) {
    std::fprintf(stderr, "ShardedAdamW::Step: params %zu, grads %zu floats, expected %zu\n",
                 params.size(), grads.size(), full_floats_);
    std::abort();
  }
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const size_t begin = ranges_[i].first, len = ranges_[i].second - ranges_[i].first;
    if (len == 0) continue;
    shards_[i]->Step(params.subspan(begin, len), grads.subspan(begin, len), lr, t, grad_scale);
  }
}

namespace {
void CheckSize(const char* what, size_t got, size_t want) {
  if (got != want) {
    std::fprintf(stderr, "ShardedAdamW::%s: %zu floats, expected %zu\n", what, got, want);
    std::abort();
  }
}
}  // namespace

void ShardedAdamW::PackGrads(absl::Span<const float> grads, absl::Span<float> packed) const {
  CheckSize("PackGrads (grads)", grads.size(), full_floats_);
  CheckSize("PackGrads (packed)", packed.size(), owned_floats_);
  size_t at = 0;
  for (const FloatRange& r : ranges_) {
    std::copy(grads.begin() + r.first, grads.begin() + r.second, packed.begin() + at);
    at += r.second - r.first;
  }
}

void ShardedAdamW::StageParams(absl::Span<const float> params, absl::Span<const float> packed_grads,
                               absl::Span<float> params_out, float lr, int64_t t,
                               float grad_scale) const {
  CheckSize("StageParams (params)", params.size(), full_floats_);
  CheckSize("StageParams (params_out)", params_out.size(), full_floats_);
  CheckSize("StageParams (packed grads)", packed_grads.size(), owned_floats_);
  size_t at = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const size_t begin = ranges_[i].first, len = ranges_[i].second - ranges_[i].first;
    if (len > 0) {
      shards_[i]->StageParams(params.subspan(begin, len), packed_grads.subspan(at, len),
                              params_out.subspan(begin, len), lr, t, grad_scale);
    }
    at += len;
  }
}

void ShardedAdamW::UpdateMoments(absl::Span<const float> packed_grads, float grad_scale) {
  CheckSize("UpdateMoments (packed grads)", packed_grads.size(), owned_floats_);
  size_t at = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const size_t len = ranges_[i].second - ranges_[i].first;
    if (len > 0) shards_[i]->UpdateMoments(packed_grads.subspan(at, len), grad_scale);
    at += len;
  }
}

int ShardedAdamW::RangeAt(size_t offset) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), offset,
                             [](size_t o, const FloatRange& r) { return o < r.first; });
  if (it == ranges_.begin()) return -1;
  --it;
  return offset < it->second ? static_cast<int>(it - ranges_.begin()) : -1;
}

}  // namespace rt::optim
