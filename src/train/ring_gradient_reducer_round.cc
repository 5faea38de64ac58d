// RingGradientReducer::UseRoundSync (ring_gradient_reducer.h): the ring's exchange goes
// from per-step gradients to round sync's outer exchange (--outer-after's switch, or
// the first step of --outer-every) and back, starting afresh as a process resumed at
// that step would: the same settings, no residuals.
#include "absl/status/status.h"
#include "train/ring_gradient_reducer.h"

namespace rt::train {

absl::Status RingGradientReducer::UseRoundSync(std::optional<collective::CodecSpec> outer_codec,
                                               bool shard) {
  const bool round = outer_codec.has_value();
  if (round == per_step_.has_value()) return absl::OkStatus();  // the mode in force
  if (in_step_) return absl::FailedPreconditionError("UseRoundSync during a step");
  collective::BucketedReducerOptions& b = options_.buckets;
  if (round) {
    per_step_ = PerStepSettings{b.codec,
                                b.topk_warmup_steps,
                                b.topk_refresh_every,
                                b.precondition_from,
                                options_.comm.auto_codec,
                                options_.check_every,
                                b.allreduce.phases,
                                options_.comm.reorder};
    b.codec = *outer_codec;
    // Pseudo-gradients go through the codec from the first round: no dense top-k
    // warm-up, no refresh steps, no AdamW preconditioning and no per-bucket planning
    // (all per-step gradient machinery).
    b.topk_warmup_steps = 0;
    b.topk_refresh_every = 0;
    b.precondition_from = -1;
    options_.comm.auto_codec = false;
    // Replicas agree only at outer steps, and the trainer asks only there: compare
    // every time it asks.
    options_.check_every = 1;
    // Sharded outer state (sync/round_sync.h): each owner's segment sum stays where the
    // reduce-scatter leaves it, and pieces follow ring positions (no re-order).
    if (shard && !options_.shard_optimizer) {
      b.allreduce.phases = collective::RingPhases::kReduceScatter;
      options_.comm.reorder = false;
      shard_outer_ = true;
    }
  } else {
    b.codec = per_step_->codec;
    b.topk_warmup_steps = per_step_->topk_warmup_steps;
    b.topk_refresh_every = per_step_->topk_refresh_every;
    b.precondition_from = per_step_->precondition_from;
    options_.comm.auto_codec = per_step_->auto_codec;
    options_.check_every = per_step_->check_every;
    b.allreduce.phases = per_step_->phases;
    options_.comm.reorder = per_step_->reorder;
    shard_outer_ = false;
    per_step_.reset();
  }
  plan_.reset();
  if (carried_->round_sync != round) {
    // The buckets (codecs, residuals) of the other mode: a per-step residual is a
    // gradient this peer has not sent yet, not a piece of a pseudo-gradient, and a
    // process resumed at this step would hold none. The next BeginStep builds new ones.
    carried_->buckets.reset();
    carried_->round_sync = round;
    buckets_on_ring_ = false;
  }
  return absl::OkStatus();
}

}  // namespace rt::train
