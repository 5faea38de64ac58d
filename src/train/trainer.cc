// The training loop (see trainer.h for the outline and guarantees).
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "ckpt/checkpoint.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "observe/system_figures.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "train/param_hash.h"
#include "train/train_checkpoint.h"

namespace rt::train {
namespace {

// This process's resident memory in MB (metrics `rss_mb`), -1 if /proc cannot say.
double CurrentRssMb() {
  std::ifstream in("/proc/self/status");
  std::ostringstream text;
  text << in.rdbuf();
  const std::optional<int64_t> bytes = observe::ParseRssBytes(text.str());
  return bytes ? static_cast<double>(*bytes) / 1e6 : -1.0;
}

absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  if (!in.good() && !in.eof()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return out.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(
    const TrainConfig& config, std::unique_ptr<GradientReducer> reducer,
    std::shared_ptr<observe::StatusBoard> board) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->board_ = std::move(board);
  t->reducer_ = reducer ? std::move(reducer) : std::make_unique<LocalGradientReducer>();

  // Data: both splits of the prepared directory.
  absl::StatusOr<data::TokenDataset> train = data::TokenDataset::Open(config.data_dir, "train");
  if (!train.ok()) return WithContext(train.status(), absl::StrCat("--data ", config.data_dir));
  absl::StatusOr<data::TokenDataset> val = data::TokenDataset::Open(config.data_dir, "val");
  if (!val.ok()) return WithContext(val.status(), absl::StrCat("--data ", config.data_dir));
  t->train_data_ = std::move(*train);
  t->val_data_ = std::move(*val);

  // Model: the shape from flags, the vocabulary from the data.
  model::GptConfig shape = config.model;
  shape.vocab_size = t->train_data_->vocab_size();
  if (config.model.vocab_size > 0 && config.model.vocab_size != shape.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab %d was asked for, but the data %s has vocab %d",
                        config.model.vocab_size, config.data_dir, shape.vocab_size));
  }
  // Data order: `slots` sequences per optimizer step over all peers (the global batch).
  const int slots = config.global_batch > 0 ? config.global_batch
                                            : config.batch * config.accum * t->reducer_->peers();
  absl::StatusOr<data::BatchSampler> sampler =
      data::BatchSampler::Create(config.seed, slots, shape.seq_len, t->train_data_->num_tokens());
  if (!sampler.ok()) {
    return WithContext(sampler.status(), absl::StrFormat("train split of %s (--seq-len %d)",
                                                         config.data_dir, shape.seq_len));
  }
  t->sampler_ = std::move(*sampler);
  t->balancer_.emplace(slots, config.balance);
  if (config.round.enabled()) t->round_balancer_.emplace(slots, config.balance);
  const bool val_fits = t->val_data_->num_tokens() >= static_cast<uint64_t>(shape.seq_len) + 1;
  if (config.eval_every > 0) {
    if (!val_fits) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the val split of %s has %u tokens, fewer than one window of --seq-len + 1 = %d; "
          "use --eval-every 0 or prepare with a larger --val-fraction",
          config.data_dir, t->val_data_->num_tokens(), shape.seq_len + 1));
    }
  }
  if (val_fits) {
    t->eval_starts_ = data::EvenlySpacedWindows(t->val_data_->num_tokens(), shape.seq_len,
                                                config.eval_batches * config.batch);
  }
  // The model last: its activation memory is only allocated for a run that can start.
  model::GptOptions options;
  options.precision = config.precision;
  options.recompute = config.recompute;
  options.max_batch = config.batch;
  ASSIGN_OR_RETURN(t->gpt_, model::Gpt::Create(shape, options));

  if (!t->train_data_->tokenizer_path().empty()) {
    ASSIGN_OR_RETURN(t->tokenizer_model_, ReadWholeFile(t->train_data_->tokenizer_path()));
  }

  // Flat buffers (DESIGN invariant 1) and the optimizer over the whole span.
  const model::ParamLayout& layout = t->gpt_->layout();
  t->params_.Resize(layout.total_floats());
  t->grads_.Resize(layout.total_floats());
  const bool sharded = t->reducer_->ShardsOptimizer();
  if (sharded) {
    // --zero 1: the moments of this peer's pieces are made before its first step, when
    // the ring (and so its pieces) is known (trainer_zero.cc), so only the parameters
    // are shared state here.
    if (t->reducer_->PreconditionFrom() >= 0) {
      return absl::InvalidArgumentError("--zero 1 works with --compress none or bf16 only");
    }
  } else {
    t->adam_ =
        std::make_unique<optim::AdamW>(config.adamw, layout.total_floats(), layout.DecayRanges());
  }
  if (config.round.enabled()) {
    // Round sync: each peer's own AdamW over the whole buffer during inner steps.
    if (sharded) {
      return absl::InvalidArgumentError(
          "--outer-every works with --zero 0 only: each peer's inner steps need its own whole "
          "AdamW state, which --zero 1 shards over the ring");
    }
    if (t->reducer_->PreconditionFrom() >= 0) {
      return absl::InvalidArgumentError(
          "--outer-every takes its codec from --outer-compress: per-step --compress topk/auto "
          "(preconditioned) does not apply to round sync");
    }
    t->round_ = std::make_unique<sync::RoundSync>(config.round, layout.total_floats());
  }
  RETURN_IF_ERROR(t->InitOrResume());
  if (t->round_) t->round_->BeginRound(t->params_.span());
  TrainStateRef state{&t->step_, {{"params", t->params_.span()}}, {}};
  if (!sharded) {
    state.buffers.push_back({"adam_m", t->adam_->m()});
    state.buffers.push_back({"adam_v", t->adam_->v()});
  }
  if (t->round_) {
    // A peer that joins (or was behind) takes the round-start copy and the momentum
    // with the rest; a replica received mid-round is one peer's own, so it goes back to
    // the round-start copy and sits the round out (RoundSync::AfterReplacedState; with
    // overlap also at a round's end whose exchange is pending, without sitting out).
    // Sharded (--outer-shard on), neither is whole here: they move as pieces between
    // the members of a ring (Trainer::SettleOuterPieces), and a peer that receives a
    // replica mid-round keeps it, sitting out with weight 0.
    if (!config.round.shard) {
      state.buffers.push_back({"outer_start", t->round_->start()});
      state.buffers.push_back({"outer_momentum", t->round_->momentum()});
    }
    if (config.round.overlap) {
      // With overlap also the pending round: its anchor and whether there is one (the
      // receiver takes part in its redo with no tokens of its own).
      state.buffers.push_back({"outer_anchor", t->round_->anchor()});
      state.buffers.push_back({"outer_pending", t->round_->pending_flag()});
    }
  }
  // An elastic ring serves and replaces this state at step boundaries.
  Trainer* self = t.get();
  state.before_overwrite = [self] {
    self->FinishBackgroundCheckpoint();
    if (self->round_) self->round_->ForgetRound();
    self->exchange_live_ = false;  // it went with the ring of the old view
    // --outer-shard on: a received state says nothing of the outer momentum; this peer
    // no longer knows it to be zero, nor began a round where it began (its pieces, if
    // any, stay valid for their outer step count: SettleOuterPieces).
    self->outer_zero_ = false;
    self->began_at_ = -1;
  };
  RETURN_IF_ERROR(t->reducer_->AttachState(state, t->loaded_epoch_));
  // A ring starts from the leader's state, whatever each peer loaded (ring_gradient_reducer.h).
  const int64_t loaded_step = t->step_;
  std::vector<absl::Span<float>> spans;
  for (const auto& named : state.buffers) spans.push_back(named.second);
  RETURN_IF_ERROR(t->reducer_->SyncState(&t->step_, spans));
  // Sharded outer state: at step 0 the momentum is zero on every peer.
  t->outer_zero_ = t->step_ == 0;
  t->began_at_ = t->step_;
  if (t->step_ != loaded_step) {
    t->tokens_seen_ = t->step_ * static_cast<int64_t>(t->sampler_->slots()) * shape.seq_len;
    t->last_checkpoint_step_ = t->step_;
  }

  // Top-k with error feedback under AdamW: the reducer divides each bucket of this
  // peer's gradient by the optimizer's frozen denominators before compressing it.
  t->precondition_from_ = t->reducer_->PreconditionFrom();
  if (t->precondition_from_ >= 0) {
    const optim::AdamW* adam = t->adam_.get();
    const int64_t frozen_t = t->precondition_from_;
    t->reducer_->SetPreconditioner([adam, frozen_t](absl::Span<float> bucket, size_t offset) {
      adam->Precondition(bucket, offset, frozen_t);
    });
  }

  if (!config.metrics_path.empty()) {
    ASSIGN_OR_RETURN(MetricsWriter writer, MetricsWriter::Open(config.metrics_path));
    t->metrics_.emplace(std::move(writer));
  }
  if (t->board_) t->board_->SetStep(t->step_);
  return t;
}

absl::Status Trainer::Run() {
  const model::GptConfig& mc = gpt_->config();
  LogInfo("model %s, %.2fM params, %s%s, activations %.1f MB", mc.ToString(),
          gpt_->layout().total_floats() / 1e6, model::PrecisionName(config_.precision),
          config_.recompute ? " recompute" : "", gpt_->ActivationBytes() / 1e6);
  LogInfo("data %s: train %u tokens, val %u tokens; %d sequences x %d tokens per step",
          config_.data_dir, train_data_->num_tokens(), val_data_->num_tokens(), sampler_->slots(),
          mc.seq_len);
  bool first = true;
  while (step_ < config_.steps) {
    // The cluster may block here, replace the state (this peer was behind) or stop us.
    ASSIGN_OR_RETURN(BoundaryAction action, reducer_->AtStepBoundary());
    tokens_seen_ = step_ * static_cast<int64_t>(sampler_->slots()) * mc.seq_len;
    if (action == BoundaryAction::kStop) {
      if (reducer_->ShardsOptimizer() || ShardedOuterCheckpoint()) {
        // Outside a ring this peer holds only its pieces of the optimizer state: the
        // ring's checkpoints (and its members) keep the state.
        LogInfo("stopping cleanly at step %d (%s: no checkpoint outside a ring)", step_,
                reducer_->ShardsOptimizer() ? "--zero 1" : "--outer-shard on");
        return absl::OkStatus();
      }
      LogInfo("stopping cleanly at step %d", step_);
      return CheckpointOrCarryOn(/*final=*/true);  // finishes a background write first
    }
    if (step_ >= config_.steps) break;
    if (first) {
      first = false;
      // The untrained model's validation loss: the baseline every later value improves on.
      if (config_.eval_every > 0 && step_ == 0) RETURN_IF_ERROR(EvaluateUntrained());
      // Round sync from random weights learned far worse in this project's curves than
      // after a few hundred per-step steps; the user may not know (the flags allow it).
      if (round_ && config_.round.after == 0 && step_ == 0) {
        LogInfo(
            "round sync from random weights: on the small models measured here it ended 13-25%% "
            "above per-step sync, and 0.4%% above (H 30, 3,000 steps) when it began after 40%% "
            "of the run in per-step steps with --outer-lr 1 --outer-momentum 0.5 "
            "--outer-overlap off --inner-lr-scale 2: --outer-after N takes N per-step steps "
            "first, then switches (docs/round-sync.md)");
      }
      if (round_ && step_ < config_.round.after) {
        LogInfo("per-step sync up to step %d, then round sync (--outer-after): %s",
                config_.round.after, config_.round.ToString());
      }
    }

    StepMetrics m;
    const int64_t before = step_;
    absl::Status st = TrainStep(&m);  // calls StepCompleted once the step is applied
    if (!st.ok()) {
      // Peers may have seen different figures of the failed step: shares start equal.
      balancer_->Reset();
      RETURN_IF_ERROR(reducer_->StepFailed(st));  // OK: the cluster re-forms; redo it
      if (step_ == before) continue;
      // The step was applied; only its closing check failed. Carry on from it.
    }
    const bool last = step_ == config_.steps;
    // Round sync: a stop waits for the round's end (a single peer's signal is seen at
    // any step; a ring's vote travels with the outer step's exchange).
    const bool stop = reducer_->StopAfterThisStep() && AtSyncPoint();

    if (config_.eval_every > 0 && (Due(config_.eval_every) || last) && !stop) {
      EvalResult e = Evaluate();
      RETURN_IF_ERROR(gpt_->status());
      m.val_loss = e.loss;
      if (std::isfinite(e.bpb)) m.val_bpb = e.bpb;
    }
    m.ckpt_failures = ckpt_failures_;
    RETURN_IF_ERROR(ReportStep(m));

    const bool ckpt_moment = IsCheckpointMoment(last, stop);
    if (ckpt_moment) last_checkpoint_time_ = absl::Now();
    if (ckpt_moment && reducer_->ShardsOptimizer()) {
      // Every member takes part; the writers receive the whole moments.
      const bool need = !config_.ckpt_dir.empty() && reducer_->WritesCheckpoints() &&
                        last_checkpoint_step_ != step_;
      absl::Status gathered = GatherMomentsForCheckpoint(need);
      if (absl::IsInternal(gathered)) return gathered;
      if (!gathered.ok()) {
        // The ring broke: the next step notices it too and the cluster re-forms.
        RETURN_IF_ERROR(CarryOn(step_, gathered, /*final=*/last || stop));
      }
    }
    if (ckpt_moment && ShardedOuterCheckpoint()) {
      // --outer-shard on: likewise the outer momentum (the writers receive it whole).
      const bool need = !config_.ckpt_dir.empty() && reducer_->WritesCheckpoints() &&
                        last_checkpoint_step_ != step_;
      absl::Status gathered = GatherOuterMomentum(need);
      if (absl::IsInternal(gathered)) return gathered;
      if (!gathered.ok()) {
        // The ring broke: the next step notices it too and the cluster re-forms.
        RETURN_IF_ERROR(CarryOn(step_, gathered, /*final=*/last || stop));
      }
    }
    if (!config_.ckpt_dir.empty() && ckpt_moment) {
      if (last || stop) {
        // The run ends here: this one is written now (after a background write in flight),
        // and its failure is the run's error.
        RETURN_IF_ERROR(CheckpointOrCarryOn(/*final=*/true));
      } else {
        StartBackgroundCheckpoint();
      }
    }
    if (stop) {
      LogInfo("stopped cleanly after step %d (a peer was asked to stop)", step_);
      return absl::OkStatus();
    }
  }
  if (first) LogInfo("already at step %d of --steps %d: nothing to do", step_, config_.steps);
  return absl::OkStatus();
}

double Trainer::ResidentMb() { return CurrentRssMb(); }

absl::Status Trainer::EvaluateUntrained() {
  EvalResult e = Evaluate();
  RETURN_IF_ERROR(gpt_->status());
  StepMetrics m;
  m.loss = e.loss;
  m.peers = reducer_->peers();
  m.rank = reducer_->rank();
  m.epoch = reducer_->epoch();
  m.leader = reducer_->leader();
  m.param_hash = ParamHashHex(ParamHash(params_.span()));
  m.val_loss = e.loss;
  if (std::isfinite(e.bpb)) m.val_bpb = e.bpb;
  return ReportStep(m);
}

absl::Status Trainer::ReportStep(const StepMetrics& step_metrics) {
  StepMetrics m = step_metrics;
  m.time_s = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  PrintStep(m);
  if (board_) {
    observe::StepPoint p;
    p.step = m.step;
    p.unix_ms = static_cast<int64_t>(m.time_s * 1e3);
    p.tokens = m.tokens;
    p.loss = m.loss;
    if (m.step > 0) {
      p.tokens_per_s = m.tokens_per_s;
      p.step_ms = m.step_ms;
      p.compute_ms = m.compute_ms;
      p.comm_ms = m.comm_ms;
      p.wait_ms = m.wait_ms;
    }
    if (m.val_loss) p.val_loss = *m.val_loss;
    if (m.val_bpb) p.val_bpb = *m.val_bpb;
    board_->SetLinks(reducer_->ProbedLinks());
    board_->OnStep(p, m.epoch, m.slots, reducer_->bytes_sent());
  }
  if (metrics_) RETURN_IF_ERROR(metrics_->Write(m));
  return absl::OkStatus();
}

absl::Status Trainer::RingPosition(int* position, std::vector<int>* members) const {
  *position = reducer_->rank();
  *members = reducer_->member_ids();
  if (static_cast<int>(members->size()) != reducer_->peers() || *position < 0 ||
      *position >= reducer_->peers()) {
    return absl::InternalError(absl::StrFormat("step %d: ring position %d of %d peers (%d ids)",
                                               step_ + 1, *position, reducer_->peers(),
                                               members->size()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::TrainStep(StepMetrics* metrics) {
  RETURN_IF_ERROR(SettleSyncMode());           // --outer-after switches here (trainer_round.cc)
  if (round_mode_) return RoundStep(metrics);  // round sync: trainer_round.cc
  // --zero 1: this peer's optimizer pieces first, when the ring changed (trainer_zero.cc;
  // may take the ring back to a checkpoint, so before anything reads the step).
  if (reducer_->ShardsOptimizer()) RETURN_IF_ERROR(SettleShardedState());
  Stopwatch step_watch;
  const uint64_t bytes_before = reducer_->bytes_sent();
  const int T = gpt_->config().seq_len;
  const float lr =
      optim::CosineLr(step_, config_.warmup, config_.steps, config_.lr, config_.min_lr);

  // 1. Zero the gradients; the reducer sees the buffer it will sum.
  grads_.Zero();
  RETURN_IF_ERROR(reducer_->BeginStep(step_, grads_.span()));

  // 2. This peer's slots (read after BeginStep: a probe may re-order the ring). With
  //    --balance the agreed shares follow the peers' speeds and each peer takes a
  //    contiguous range in ring order; without, the equal strided split. Which peer
  //    computes which slot never changes the windows (DESIGN invariant 3).
  int position = 0;
  std::vector<int> members;
  RETURN_IF_ERROR(RingPosition(&position, &members));
  if (reducer_->epoch() != balancer_epoch_) {  // a new view: shares start equal again
    balancer_->Reset();
    balancer_epoch_ = reducer_->epoch();
  }
  const std::vector<int> shares = balancer_->Assign(members, step_);
  std::vector<int> my_slots;
  if (config_.balance.enabled) {
    my_slots = SlotBalancer::ContiguousSlots(shares, position);
  } else {
    my_slots = sampler_->SlotsOf(position, reducer_->peers());
  }

  // 3. Micro-steps over this peer's slots, `batch` sequences at a time (a share above
  //    --batch is more micro-steps; memory stays that of `batch`). Every token of the
  //    global step weighs 1/global_tokens, so the sum over peers is the mean.
  const int64_t global_tokens = static_cast<int64_t>(sampler_->slots()) * T;
  const float grad_scale = 1.0f / static_cast<float>(global_tokens);
  std::vector<int32_t> tokens(static_cast<size_t>(config_.batch) * T);
  std::vector<int32_t> targets(tokens.size());
  // A oneDNN failure (model/matmul.h) leaves NaN in the gradients: they must not reach
  // the other peers, so the reducer hears of ready gradients only while the model is fine.
  std::function<void(size_t)> on_ready = [this](size_t offset) {
    if (gpt_->status().ok()) reducer_->OnGradReady(offset);
  };
  StepTotals totals;
  Stopwatch compute_watch;  // forward+backward of this peer's share: its speed
  for (size_t first = 0; first < my_slots.size(); first += config_.batch) {
    if (reducer_->StepAborted()) {
      // A view change made this step's ring useless: settle the reducer, then fail.
      reducer_->OnGradReady(0);
      StepTotals ignored;
      (void)reducer_->Finish(&ignored);
      return absl::AbortedError(absl::StrFormat("step %d: aborted by a view change", step_ + 1));
    }
    const size_t count = std::min<size_t>(config_.batch, my_slots.size() - first);
    std::vector<uint64_t> starts(count);
    for (size_t i = 0; i < count; ++i)
      starts[i] = sampler_->WindowStart(step_, my_slots[first + i]);
    data::ReadWindows(*train_data_, starts, T, tokens.data(), targets.data());
    const bool last_micro_step = first + count >= my_slots.size();
    totals.loss_sum += gpt_->ForwardBackward(params_.span(), tokens.data(), targets.data(),
                                             static_cast<int>(count), grad_scale, grads_.span(),
                                             last_micro_step ? on_ready : nullptr);
    if (!gpt_->status().ok()) {
      // Internal: fatal (StepFailed returns it); this peer leaves, the others carry on.
      reducer_->Abort(gpt_->status());
      return gpt_->status();
    }
    totals.tokens += static_cast<int64_t>(count) * T;
  }
  if (my_slots.empty()) reducer_->OnGradReady(0);  // nothing to add: all final at once
  totals.compute_s = compute_watch.ElapsedSeconds();
  totals.slots = static_cast<int>(my_slots.size());
  const double backward_ms = step_watch.ElapsedMs();

  // 4. Sum gradients (and loss, tokens, every peer's speed figures, checkpoint votes)
  // over peers.
  totals.checkpoint_vote = CheckpointTimeDue();
  checkpoint_agreed_ = false;
  Stopwatch comm_watch;
  RETURN_IF_ERROR(reducer_->Finish(&totals));
  checkpoint_agreed_ = totals.checkpoint_vote;
  const double comm_ms = comm_watch.ElapsedMs();
  if (totals.peer_slots != shares) {
    // Peers computed different splits (they saw different figures): nothing is
    // applied; every peer's balancer starts over, and the step is redone.
    balancer_->Reset();
    return absl::AbortedError(absl::StrFormat(
        "step %d: the peers trained slot shares %s, this peer expected %s", step_ + 1,
        absl::StrJoin(totals.peer_slots, ","), absl::StrJoin(shares, ",")));
  }
  balancer_->Observe(members, totals.peer_compute_s, totals.peer_slots);
  double slowest_s = 0;
  for (double s : totals.peer_compute_s) slowest_s = std::max(slowest_s, s);
  const double wait_ms = std::clamp((slowest_s - totals.compute_s) * 1e3, 0.0, comm_ms);
  if (totals.tokens != global_tokens) {
    return absl::InternalError(
        absl::StrFormat("step %d: peers trained on %d tokens, the step needs %d", step_,
                        totals.tokens, global_tokens));
  }
  const double loss = totals.loss_sum / static_cast<double>(totals.tokens);

  // 5. Clip by the global norm, then one AdamW step (t is 1-based). A preconditioned
  //    step (top-k after its dense warm-up) was divided by the frozen second moment on
  //    every peer before the exchange: momentum only, no clipping (optim/adamw.h).
  // Parameters and moments change below: a checkpoint still reading them must be done.
  Stopwatch ckpt_wait_watch;
  FinishBackgroundCheckpoint();
  const double ckpt_wait_ms = ckpt_wait_watch.ElapsedMs();
  Stopwatch update_watch;
  ASSIGN_OR_RETURN(const double grad_sum_of_squares, reducer_->GradSumOfSquares(grads_.span()));
  const double grad_norm = std::sqrt(grad_sum_of_squares);
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    return absl::InternalError(absl::StrFormat(
        "training diverged at step %d: loss %g, gradient norm %g (try a lower --lr)", step_ + 1,
        loss, grad_norm));
  }
  if (reducer_->ShardsOptimizer()) {
    // ZeRO-1: this peer updates its pieces, then every peer's pieces go around.
    RETURN_IF_ERROR(ShardedUpdate(lr, optim::ClipScale(grad_norm, config_.clip)));
  } else if (precondition_from_ >= 0 && step_ >= precondition_from_) {
    // v goes on learning where the sum was exact (auto's none/bf16 buckets: Adam's
    // step there; top-k's refresh steps: top-k's step).
    adam_->StepPreconditioned(params_.span(), grads_.span(), lr, step_ + 1, precondition_from_,
                              reducer_->DenseSumRanges(), reducer_->RefreshedRanges());
  } else {
    const float clip_scale = optim::ClipScale(grad_norm, config_.clip);
    adam_->Step(params_.span(), grads_.span(), lr, step_ + 1, clip_scale);
  }
  ++step_;
  tokens_seen_ += totals.tokens;
  const uint64_t hash = ParamHash(params_.span());
  const double update_ms = update_watch.ElapsedMs();

  StepMetrics& m = *metrics;
  m.step = step_;
  m.loss = loss;
  m.lr = lr;
  m.tokens = tokens_seen_;
  m.step_ms = step_watch.ElapsedMs();
  m.tokens_per_s = m.step_ms > 0 ? totals.tokens / (m.step_ms * 1e-3) : 0;
  m.compute_ms = backward_ms + update_ms;
  m.comm_ms = comm_ms;
  m.slots = totals.slots;
  m.wait_ms = wait_ms;
  m.ckpt_wait_ms = ckpt_wait_ms;
  m.rss_mb = CurrentRssMb();
  m.bytes_sent = reducer_->bytes_sent() - bytes_before;
  m.grad_norm = grad_norm;
  m.peers = reducer_->peers();
  m.rank = reducer_->rank();
  m.epoch = reducer_->epoch();
  m.leader = reducer_->leader();
  m.param_hash = ParamHashHex(hash);
  // Last: the step is applied even if this check cannot complete (the ring broke);
  // then the reducer learns that it was (its residuals become final, joiners may come).
  const absl::Status check = reducer_->CheckParamHash(step_, hash);
  reducer_->StepCompleted(step_);
  return check;
}

EvalResult Trainer::Evaluate() {
  return EvaluateWindows(*gpt_, params_.span(), *val_data_, eval_starts_);
}

void Trainer::PrintStep(const StepMetrics& m) const {
  if (!config_.print_steps) return;
  std::string line;
  if (m.step == 0) {
    line = absl::StrFormat("step %5d/%d | untrained", m.step, config_.steps);
  } else {
    line = absl::StrFormat("step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %6.0f tok/s | %7.1f ms",
                           m.step, config_.steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s,
                           m.step_ms);
    if (m.peers > 1) {
      absl::StrAppendFormat(&line, " (comm %.1f ms, %d slots, wait %.1f ms)", m.comm_ms, m.slots,
                            m.wait_ms);
    }
  }
  if (m.val_loss) absl::StrAppendFormat(&line, " | val_loss %.4f", *m.val_loss);
  if (m.val_bpb) absl::StrAppendFormat(&line, " val_bpb %.4f", *m.val_bpb);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace rt::train
