// Learning-rate schedule: linear warm-up, then cosine decay to a floor.
#pragma once

#include <cstdint>

namespace rt::optim {

// Learning rate for optimizer step `step` (0-based):
//   step <  warmup:          max_lr * (step + 1) / warmup      (reaches max_lr at warmup-1)
//   warmup <= step < total:  min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2,
//                            r = (step - warmup) / (total - warmup)
//   step >= total:           min_lr
// warmup <= 0 means no warm-up. Pure function: the same value on every peer and on resume.
float CosineLr(int64_t step, int64_t warmup, int64_t total, float max_lr, float min_lr);

}  // namespace rt::optim
