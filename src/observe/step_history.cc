// Bounded step history with decimation (see step_history.h).
#include "observe/step_history.h"

#include <algorithm>

namespace rt::observe {

void StepHistory::Add(const StepPoint& p) {
  while (!points_.empty() && points_.back().step >= p.step) points_.pop_back();
  const bool eval = std::isfinite(p.val_loss);
  if (!eval && p.step % stride_ != 0) return;
  points_.push_back(p);
  if (points_.size() <= capacity_) return;
  stride_ *= 2;
  std::vector<StepPoint> kept;
  kept.reserve(capacity_);
  for (const StepPoint& q : points_) {
    if (q.step % stride_ == 0 || std::isfinite(q.val_loss)) kept.push_back(q);
  }
  // Evaluations alone could exceed the capacity (--eval-every 1): thin them too.
  while (kept.size() > capacity_) {
    std::vector<StepPoint> half;
    for (size_t i = 0; i < kept.size(); i += 2) half.push_back(kept[i]);
    kept.swap(half);
  }
  points_.swap(kept);
}

}  // namespace rt::observe
