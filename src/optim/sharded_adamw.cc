// AdamW over owned ranges of the flat buffer (see sharded_adamw.h).
#include "optim/sharded_adamw.h"

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

}  // namespace rt::optim
