// TrainConfig validation: every message names the flag as the user typed it.
#include "train/train_config.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace rt::train {

absl::Status TrainConfig::Validate() const {
  auto bad = [](auto&&... args) { return absl::InvalidArgumentError(absl::StrFormat(args...)); };
  if (data_dir.empty()) return bad("--data is required (a directory written by ringtrain prepare)");
  if (batch < 1) return bad("--batch must be >= 1, got %d", batch);
  if (accum < 1) return bad("--accum must be >= 1, got %d", accum);
  if (global_batch < 0)
    return bad("--global-batch must be >= 0 (0 = default), got %d", global_batch);
  if (!(balance.max_skew >= 1) || !std::isfinite(balance.max_skew)) {
    return bad("--max-skew must be a number >= 1, got %g", balance.max_skew);
  }
  if (steps < 0) return bad("--steps must be >= 0, got %d", steps);
  if (!(lr > 0) || !std::isfinite(lr)) return bad("--lr must be positive, got %g", lr);
  if (!(min_lr >= 0) || min_lr > lr) {
    return bad("--min-lr must be in [0, --lr=%g], got %g", lr, min_lr);
  }
  if (warmup < 0) return bad("--warmup must be >= 0, got %d", warmup);
  if (!(adamw.weight_decay >= 0) || adamw.weight_decay >= 1.0f / lr) {
    return bad("--weight-decay must be >= 0 and below 1/lr, got %g", adamw.weight_decay);
  }
  if (!(clip >= 0)) return bad("--clip must be >= 0 (0 = off), got %g", clip);
  if (eval_every < 0) return bad("--eval-every must be >= 0, got %d", eval_every);
  if (eval_batches < 1) return bad("--eval-batches must be >= 1, got %d", eval_batches);
  if (ckpt_every < 0) return bad("--ckpt-every must be >= 0, got %d", ckpt_every);
  if (!(ckpt_minutes >= 0)) return bad("--ckpt-minutes must be >= 0, got %g", ckpt_minutes);
  if (ckpt_keep < 0) return bad("--keep must be >= 0 (0 = all), got %d", ckpt_keep);
  if (ckpt_every > 0 && ckpt_dir.empty()) return bad("--ckpt-every needs --ckpt-dir");
  if (resume && ckpt_dir.empty()) return bad("--resume needs --ckpt-dir");
  if (absl::Status r = round.Validate(); !r.ok()) return r;
  if (round.after > 0 && round.after >= steps) {
    return bad(
        "--outer-after %d must be below --steps %d (the run would never switch to round "
        "sync)",
        round.after, steps);
  }
  // The shape without the vocabulary (which comes from the data).
  model::GptConfig shape = model;
  if (shape.vocab_size <= 0) shape.vocab_size = 1;
  return shape.Validate();
}

}  // namespace rt::train
