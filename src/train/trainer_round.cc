// Trainer's steps under round sync (--outer-every H; sync/round_sync.h): inner steps
// on this peer's slots with no communication, and at each round's end the outer step
// through the GradientReducer, which sums the token-weighted contributions with the
// --outer-compress codec, views, aborts and redo among survivors included; and the
// switch into round sync at --outer-after's step (SettleSyncMode).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "absl/strings/str_format.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "observe/peer_report.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "train/exchange_hold.h"
#include "train/param_hash.h"
#include "train/trainer.h"

namespace rt::train {

absl::Status Trainer::SettleSyncMode() {
  const bool round = round_ != nullptr && step_ >= config_.round.after;
  if (round == round_mode_) return absl::OkStatus();
  FinishBackgroundCheckpoint();  // it may read the outer state written below
  RETURN_IF_ERROR(reducer_->UseRoundSync(
      round ? std::optional(config_.round.codec) : std::optional<collective::CodecSpec>(),
      config_.round.shard));
  round_mode_ = round;
  if (!round) {
    LogInfo("step %d: per-step sync until step %d (--outer-after)", step_ + 1, config_.round.after);
    return absl::OkStatus();
  }
  if (config_.round.after > 0 && step_ == config_.round.after) {
    // The switch: the replicas agree here (per-step sync), and round sync begins as a
    // run resumed from a per-step checkpoint of this step would (trainer.h).
    round_->Restart(params_.span());
    outer_zero_ = true;  // sharded: every peer holds the zero momentum
    outer_held_ = -1;
    LogInfo(
        "step %d: switching to round sync after %d per-step steps (--outer-after): %s; outer "
        "momentum from zero",
        step_ + 1, step_, config_.round.ToString());
  }
  return absl::OkStatus();
}

bool Trainer::AtSyncPoint() const {
  // With overlap, only a round end that drained (no exchange left pending).
  return !round_mode_ ||
         (sync::IsRoundEnd(step_, config_.steps, config_.round.every) && !round_->has_pending());
}

bool Trainer::Due(int interval) const {
  if (interval <= 0) return false;
  if (!round_mode_) return step_ % interval == 0;
  if (!AtSyncPoint()) return false;
  const int64_t round_start = step_ - 1 - (step_ - 1) % config_.round.every;
  return sync::DueInRound(round_start, step_, interval);
}

int64_t Trainer::OuterStepsAt(int64_t step) const {
  // Round ends are multiples of H (and the run's end); with --outer-after N those up to
  // N were per-step steps: the first outer step is at the first multiple above N.
  const int h = config_.round.every;
  return step / h + (step % h != 0 && step == config_.steps ? 1 : 0) - config_.round.after / h;
}

absl::Status Trainer::RoundStep(StepMetrics* metrics) {
  checkpoint_agreed_ = false;  // a time-based checkpoint comes only after an outer step
  Stopwatch step_watch;
  const int T = gpt_->config().seq_len;
  // --inner-lr-scale: round sync's inner steps take a multiple of the schedule (the
  // per-step steps before --outer-after are TrainStep's and keep it).
  const float lr =
      optim::CosineLr(step_, config_.warmup, config_.steps, config_.lr, config_.min_lr) *
      config_.round.inner_lr_scale;
  StepMetrics& m = *metrics;
  m.lr = lr;

  // 1. The inner step (unless it was applied before this step's exchange failed): this
  //    peer's slots of the step (the shares planned at the last outer step from the
  //    peers' speeds with --balance on, the equal strided split before a plan of this
  //    view and without; train/round_balancer.h; which peer computes which slot never
  //    changes the windows: DESIGN invariant 3), its own mean gradient, clipping and
  //    AdamW.
  double inner_ms = 0;
  const int64_t h = config_.round.every;
  if (round_->replaced() && config_.round.after > 0 && step_ == config_.round.after) {
    // A state received at --outer-after's switch is per-step sync's (the serving peer
    // may not have switched yet): round sync begins from it as SettleSyncMode does.
    round_->Restart(params_.span());
    outer_zero_ = true;
    outer_held_ = -1;
  } else if (round_->replaced()) {  // a received state: mid-round, sit the round out
    round_->AfterReplacedState(step_ % h == 0, params_.span());
    if (round_->sitting_out()) {
      LogInfo(
          "received a replica in the middle of a round: this peer waits for step %d's outer "
          "step and trains from its shared parameters",
          std::min<int64_t>((step_ / h + 1) * h, config_.steps));
    }
  }
  // --outer-shard on: this ring's pieces of the outer state (trainer_round_shard.cc).
  if (round_->sharded()) RETURN_IF_ERROR(SettleOuterPieces());
  // A view change was announced: stop here rather than apply inner steps that the
  // view's state agreement does not know of (the step is redone after it).
  if (reducer_->StepAborted()) {
    return absl::AbortedError(absl::StrFormat("step %d: a view change was announced", step_ + 1));
  }
  // A redone exchange reports its inner part's loss; a peer sitting the round out none.
  m.loss = round_->sitting_out() ? std::nan("") : round_->inner_loss();
  if (!round_->InnerDone(step_) && !round_->sitting_out()) {
    int position = 0;
    std::vector<int> members;
    RETURN_IF_ERROR(RingPosition(&position, &members));
    const std::vector<int> my_slots =
        RoundBalancer::SlotsOf(round_balancer_->Shares(members, reducer_->epoch()), position);
    const int64_t my_tokens = static_cast<int64_t>(my_slots.size()) * T;
    grads_.Zero();
    const float grad_scale = my_tokens > 0 ? 1.0f / static_cast<float>(my_tokens) : 0.0f;
    std::vector<int32_t> tokens(static_cast<size_t>(config_.batch) * T);
    std::vector<int32_t> targets(tokens.size());
    double loss_sum = 0;
    Stopwatch compute_watch;  // forward+backward of this peer's share: its speed
    for (size_t first = 0; first < my_slots.size(); first += config_.batch) {
      const size_t count = std::min<size_t>(config_.batch, my_slots.size() - first);
      std::vector<uint64_t> starts(count);
      for (size_t i = 0; i < count; ++i)
        starts[i] = sampler_->WindowStart(step_, my_slots[first + i]);
      data::ReadWindows(*train_data_, starts, T, tokens.data(), targets.data());
      loss_sum +=
          gpt_->ForwardBackward(params_.span(), tokens.data(), targets.data(),
                                static_cast<int>(count), grad_scale, grads_.span(), nullptr);
      if (!gpt_->status().ok()) {
        reducer_->Abort(gpt_->status());
        return gpt_->status();  // Internal: fatal
      }
    }
    const double compute_s = compute_watch.ElapsedSeconds();
    FinishBackgroundCheckpoint();  // the buffers change below
    const double grad_norm = std::sqrt(optim::SumOfSquares(grads_.span()));
    // A peer without slots has no loss: NaN, written as null in --metrics (a 0 there was
    // averaged with the others' losses by whoever read the file).
    const double loss = my_tokens > 0 ? loss_sum / static_cast<double>(my_tokens) : std::nan("");
    if ((my_tokens > 0 && !std::isfinite(loss)) || !std::isfinite(grad_norm)) {
      return absl::InternalError(absl::StrFormat(
          "training diverged at step %d: loss %g, gradient norm %g (try a lower --lr)", step_ + 1,
          loss, grad_norm));
    }
    if (reducer_->StepAborted()) {
      return absl::AbortedError(absl::StrFormat("step %d: a view change was announced", step_ + 1));
    }
    // A peer without slots in this step (more peers than sequences) leaves its replica
    // as it is: no tokens, no update.
    if (my_tokens > 0) {
      adam_->Step(params_.span(), grads_.span(), lr, step_ + 1,
                  optim::ClipScale(grad_norm, config_.clip));
    }
    round_->AddTokens(my_tokens);
    round_balancer_->AddInnerStep(compute_s, static_cast<int>(my_slots.size()));
    inner_ms = step_watch.ElapsedMs();
    m.loss = loss;
    round_->set_inner_loss(loss);
    m.grad_norm = grad_norm;
    m.slots = static_cast<int>(my_slots.size());
  }
  const bool round_end = sync::IsRoundEnd(step_ + 1, config_.steps, config_.round.every);

  // 2. At a round's end, the outer step. Tokens first (an exact small collective), so
  //    the weights renormalise over the peers of this exchange; then the exchange of
  //    the weighted contributions in grads_ (free after AdamW), which the reducer sums
  //    exactly as it sums gradients (its codec is --outer-compress, its error feedback
  //    this peer's); then the outer Nesterov update, identical on every peer.
  //    With --outer-overlap, first the previous round's exchange (in flight since that
  //    round's end): its sum, then either this round's exchange starts beside the next
  //    round (after the step completes) or, where the replicas must agree now, it runs
  //    here too and both outer steps are applied (DrainRound).
  double outer_ms = -1;
  int64_t outer_bytes = -1;
  double pseudo_grad_norm = -1;
  bool start_exchange = false;
  if (round_end) {
    round_->MarkInnerDone(step_);
    Stopwatch outer_watch;
    // The bytes of an exchange that ran beside the inner steps count here, where it ends.
    const uint64_t bytes_before = exchange_live_ ? exchange_bytes_base_ : reducer_->bytes_sent();
    bool pending_sum = false;
    StepTotals pending_totals;
    if (round_->has_pending()) {
      ASSIGN_OR_RETURN(pending_sum, FinishPendingExchange(&pending_totals));
    }
    const bool voted = pending_totals.checkpoint_vote || reducer_->StopAfterThisStep();
    if (!config_.round.overlap || RoundEndDrains(voted)) {
      ASSIGN_OR_RETURN(const sync::OuterStepFigures f,
                       DrainRound(pending_sum, pending_totals.checkpoint_vote));
      pseudo_grad_norm = f.pseudo_grad_norm;
    } else {
      FinishBackgroundCheckpoint();  // the buffers change below
      if (pending_sum) {
        pseudo_grad_norm =
            round_->ApplyDelayed(round_->exchange(), params_.span()).pseudo_grad_norm;
      }
      round_->Launch(params_.span());
      start_exchange = true;
    }
    outer_ms = outer_watch.ElapsedMs();
    outer_bytes = static_cast<int64_t>(reducer_->bytes_sent() - bytes_before);
    if (pseudo_grad_norm < 0) outer_ms = -1;  // no outer step applied yet (overlap's first round)
  }

  ++step_;
  // At a round's end the shared parameters (the round-start copy; with overlap the
  // replicas hold their own progress of the round on top of it) are what the peers agree
  // on and compare; between round ends, this peer's replica.
  // (Sharded, the outer step left params == the new shared parameters on every peer.)
  const uint64_t hash =
      ParamHash(round_end && !round_->sharded() ? absl::Span<const float>(round_->start())
                                                : absl::Span<const float>(params_.span()));
  m.step = step_;
  m.tokens = step_ * static_cast<int64_t>(sampler_->slots()) * T;
  tokens_seen_ = m.tokens;
  m.step_ms = step_watch.ElapsedMs();
  m.tokens_per_s = m.step_ms > 0 ? sampler_->slots() * T / (m.step_ms * 1e-3) : 0;
  m.compute_ms = inner_ms;
  m.comm_ms = std::max(0.0, outer_ms);
  m.rss_mb = ResidentMb();
  m.bytes_sent = std::max<int64_t>(0, outer_bytes);
  m.peers = reducer_->peers();
  m.rank = reducer_->rank();
  m.epoch = reducer_->epoch();
  m.leader = reducer_->leader();
  m.param_hash = ParamHashHex(hash);
  m.outer_step = OuterStepsAt(step_) - (round_->has_pending() ? 1 : 0);
  m.outer_ms = outer_ms;
  m.outer_bytes = outer_bytes;
  m.pseudo_grad_norm = pseudo_grad_norm;
  if (round_end && pseudo_grad_norm >= 0) {
    const std::string line = absl::StrFormat(
        "outer step %d at step %d: pseudo-gradient norm %.4g, %.1f ms, %d bytes sent", m.outer_step,
        step_, pseudo_grad_norm, outer_ms, outer_bytes);
    LogInfo("%s", line);
    // One event per outer step for the status pages and --events (from ring position 0
    // only: every peer saw the same step).
    if (board_ && reducer_->rank() == 0) {
      observe::ClusterEvent e;
      e.kind = "outer_step";
      e.epoch = reducer_->epoch();
      e.step = step_;
      e.message = line;
      board_->Record(std::move(e));
    }
  }
  // Replicas agree only at a round's end: the hashes are compared there (and the
  // reducer hears of every applied step, inner ones too, for its step count).
  absl::Status check = round_end ? reducer_->CheckParamHash(step_, hash) : absl::OkStatus();
  // The next round's shares (--balance), from figures every peer receives alike; the
  // run's last step has no next round (and a collective there would race the peers'
  // exits).
  if (check.ok() && round_end && step_ < config_.steps) check = PlanNextRound(&m);
  if (round_end) {
    reducer_->StepCompleted(step_);  // also makes the finished exchange's residuals final
  } else {
    reducer_->InnerStepCompleted(step_);  // joiners wait for the outer step
  }
  // Overlap: this round's exchange now starts beside the next round. If it cannot (the
  // ring broke), the step stays applied and the exchange is redone at the next round's
  // end among the peers of that view (FinishPendingExchange).
  if (check.ok() && start_exchange) check = StartPendingExchange();
  return check;
}

absl::Status Trainer::PlanNextRound(StepMetrics* metrics) {
  const std::vector<int> members = reducer_->member_ids();
  const int position = reducer_->rank();
  const uint64_t epoch = reducer_->epoch();
  const RoundFigures mine = round_balancer_->Report(members, position, epoch);
  // Every peer decides alike whether to gather (--balance is in the ring's fingerprint).
  if (!config_.balance.enabled || reducer_->peers() <= 1) return absl::OkStatus();
  const std::array<int64_t, RoundFigures::kValues> values = mine.Encode();
  absl::StatusOr<std::vector<std::vector<int64_t>>> all =
      reducer_->AllgatherInt64s(absl::MakeConstSpan(values));
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrFormat("step %d: gathering the round's balance figures: %s", step_,
                                        all.status().message()));
  }
  if (all->size() != members.size()) {
    return absl::InternalError(
        absl::StrFormat("step %d: balance figures from %d ring positions, the view has %d members",
                        step_, all->size(), members.size()));
  }
  std::vector<RoundFigures> figures;
  for (size_t p = 0; p < all->size(); ++p) {
    ASSIGN_OR_RETURN(RoundFigures f,
                     RoundFigures::Decode((*all)[p], static_cast<int>(p), sampler_->slots()));
    figures.push_back(f);
  }
  metrics->wait_ms = RoundBalancer::WaitSeconds(figures, position) * 1e3;
  round_balancer_->Plan(figures, members, epoch, OuterStepsAt(step_), step_);
  return absl::OkStatus();
}

bool Trainer::RoundEndDrains(bool voted) const {
  const int64_t done = step_ + 1;  // the step count once this step completes
  const int64_t round_start = step_ - step_ % config_.round.every;
  return done == config_.steps || voted ||
         sync::DueInRound(round_start, done, config_.eval_every) ||
         (!config_.ckpt_dir.empty() && sync::DueInRound(round_start, done, config_.ckpt_every));
}

absl::Status Trainer::StartPendingExchange() {
  ASSIGN_OR_RETURN(const std::vector<int64_t> tokens,
                   reducer_->AllgatherInt64(round_->pending_tokens()));
  // Fault tests only (exchange_hold.h): the round that ended at step_ - 1.
  HoldInExchangeForTests(step_ - 1, /*beside_next_round=*/true);
  int64_t total = 0;
  for (int64_t t : tokens) total += t;
  if (total == 0) return absl::OkStatus();  // redone (and then dropped) at the round's end
  round_->Recontribute(sync::RoundSync::Weight(round_->pending_tokens(), total));
  exchange_bytes_base_ = reducer_->bytes_sent();
  RETURN_IF_ERROR(reducer_->BeginStep(step_ - 1, round_->exchange()));
  reducer_->OnGradReady(0);  // the reducer's thread sends while the next round computes
  exchange_live_ = true;
  exchange_epoch_ = reducer_->epoch();
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::FinishPendingExchange(StepTotals* totals) {
  totals->tokens = round_->pending_tokens();
  // --ckpt-minutes: the vote rides on this exchange too (DrainRound passes it on).
  totals->checkpoint_vote = CheckpointTimeDue();
  if (exchange_live_ && exchange_epoch_ == reducer_->epoch()) {
    exchange_live_ = false;
    RETURN_IF_ERROR(reducer_->Finish(totals));  // a failure: redone when the step is
    return true;
  }
  // Lost with the ring of an earlier view (or never started): redone among the peers of
  // this one, weighted by their tokens in that round (a peer whose replica came from
  // another peer has none: that peer contributes it).
  exchange_live_ = false;
  ASSIGN_OR_RETURN(const std::vector<int64_t> tokens,
                   reducer_->AllgatherInt64(round_->pending_tokens()));
  HoldInExchangeForTests(step_);  // fault tests only (exchange_hold.h)
  int64_t total = 0;
  for (int64_t t : tokens) total += t;
  if (total == 0) {
    LogInfo(
        "step %d: no peer of this view trained in the previous round; its progress stays in "
        "the replicas and goes with this round's exchange",
        step_ + 1);
    round_->DropPending();
    return false;
  }
  LogInfo("step %d: the previous round's exchange is redone among %d peers", step_ + 1,
          static_cast<int>(tokens.size()));
  round_->Recontribute(sync::RoundSync::Weight(round_->pending_tokens(), total));
  RETURN_IF_ERROR(reducer_->BeginStep(step_, round_->exchange()));
  reducer_->OnGradReady(0);
  RETURN_IF_ERROR(reducer_->Finish(totals));
  return true;
}

absl::StatusOr<sync::OuterStepFigures> Trainer::DrainRound(bool pending_sum,
                                                           bool voted_checkpoint) {
  ASSIGN_OR_RETURN(const std::vector<int64_t> round_tokens,
                   reducer_->AllgatherInt64(round_->round_tokens()));
  HoldInExchangeForTests(step_);  // fault tests only (exchange_hold.h)
  int64_t total_tokens = 0;
  for (int64_t t : round_tokens) total_tokens += t;
  const float weight = sync::RoundSync::Weight(round_->round_tokens(), total_tokens);
  if (pending_sum) {
    // Nothing is applied before both exchanges finished (a failure redoes the step
    // from the same state on every peer); the first one's residuals are kept.
    round_->DrainContribution(round_->exchange(), params_.span(), weight, grads_.span());
    reducer_->CommitExchange();
  } else {
    round_->Contribution(params_.span(), weight, grads_.span());
  }
  RETURN_IF_ERROR(reducer_->BeginStep(step_, grads_.span()));
  reducer_->OnGradReady(0);
  StepTotals totals;
  totals.tokens = round_->round_tokens();
  // --ckpt-minutes: the same vote as a per-step ring's, carried by the outer exchange,
  // so every peer checkpoints after the same round whatever the clocks.
  totals.checkpoint_vote = CheckpointTimeDue() || voted_checkpoint;
  RETURN_IF_ERROR(reducer_->Finish(&totals));
  checkpoint_agreed_ = totals.checkpoint_vote;
  FinishBackgroundCheckpoint();
  // No peer of this ring trained in the round: e.g. the state a view change resumed from
  // came from a peer that had no slots (--balance) and the others received it mid-round
  // and sat out. The exchange ran all the same (it carries the votes, and every peer
  // decides from the same token counts), but its sum of zero weights is no average:
  // applied, it scaled the parameters down whole (a loss of 4.5 nats from 3.1). The
  // round-start copy stays (RoundSync::SkipOuterStep).
  const bool empty = total_tokens == 0 && !pending_sum;
  if (empty) {
    LogInfo(
        "step %d: no peer of this view trained in this round; no outer step, the round's "
        "shared parameters stay",
        step_ + 1);
  }
  if (round_->sharded()) return ShardedOuterStep(empty);  // no overlap: nothing pending
  if (empty) {
    round_->SkipOuterStep(params_.span());
    return sync::OuterStepFigures{};
  }
  if (pending_sum) (void)round_->ApplyDelayed(round_->exchange(), params_.span());
  return round_->Apply(grads_.span(), params_.span());
}

}  // namespace rt::train
