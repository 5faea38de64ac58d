// Linear warm-up then cosine decay (see lr_schedule.h for the formula).
#include "optim/lr_schedule.h"

#include <cmath>

namespace rt::optim {

float CosineLr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr) {
  if (step < 0) step = 0;
  if (warmup > 0 && step < warmup) {
    return static_cast<float>(static_cast<double>(max_lr) * static_cast<double>(step + 1) /
                              static_cast<double>(warmup));
  }
  if (step >= total) return min_lr;
  const int64_t warm = warmup > 0 ? warmup : 0;
  const double r = static_cast<double>(step - warm) / static_cast<double>(total - warm);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * r));
  return static_cast<float>(min_lr + cosine * (static_cast<double>(max_lr) - min_lr));
}

}  // namespace rt::optim
