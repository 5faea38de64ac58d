// Trainer: one training run of a GPT on token shards, nanoGPT-style.
//
// Run() is the loop a newcomer can read top to bottom:
//   per optimizer step: [step boundary: an elastic ring may wait, re-form, replace the
//   state or stop here (gradient_reducer.h)] -> [first time: evaluate the untrained
//   model] -> zero grads -> micro-steps of `batch` sequences over this peer's share of
//   the global batch (forward+backward) ->
//   reduce gradients across peers (GradientReducer; nothing for one peer) -> clip ->
//   AdamW with the cosine schedule -> log (stdout, --metrics) -> [evaluate] -> [checkpoint].
//
// Determinism: parameters come from --seed, data windows from (seed, step, slot)
// (data/batch_sampler.h), and every kernel is deterministic for a thread count, so
// a run is reproducible and N steps + resume + N steps equals 2N steps bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_builder.h"
#include "collective/piece_exchange.h"
#include "core/aligned_buffer.h"
#include "data/batch_sampler.h"
#include "data/token_dataset.h"
#include "model/gpt.h"
#include "observe/status_board.h"
#include "optim/adamw.h"
#include "optim/sharded_adamw.h"
#include "sync/round_sync.h"
#include "train/background_checkpoint.h"
#include "train/evaluator.h"
#include "train/gradient_reducer.h"
#include "train/metrics_writer.h"
#include "train/round_balancer.h"
#include "train/slot_balancer.h"
#include "train/train_config.h"

namespace rt::train {

class Trainer {
 public:
  // Opens the data, builds the model and either initialises it from the seed or, with
  // config.resume, loads the newest valid checkpoint of config.ckpt_dir; then every
  // peer of a ring takes the leader's step and state (GradientReducer::SyncState), so
  // peers without the checkpoint start identical too. `reducer` null means a single
  // peer. `board` (optional, --http / --events) is told every step, evaluation and
  // checkpoint. Errors name the flag, file or checkpoint at fault.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainConfig& config, std::unique_ptr<GradientReducer> reducer = nullptr,
      std::shared_ptr<observe::StatusBoard> board = nullptr);

  // Trains until config.steps optimizer steps are done (evaluating, logging and
  // checkpointing on the way). Returns at once if a resumed run is already there.
  absl::Status Run();

  // One optimizer step (no evaluation, logging or checkpoint); fills *metrics. Once the
  // step is applied the reducer hears of it (GradientReducer::StepCompleted), also when
  // the closing param_hash check fails.
  absl::Status TrainStep(StepMetrics* metrics);
  // Validation loss on the fixed evaluation windows (eval_batches * batch of them).
  EvalResult Evaluate();
  // Writes a checkpoint of the current step into config.ckpt_dir (if this peer has the
  // duty and has not written this step yet), now: a background write in flight is
  // finished first. Run() writes the periodic ones in the background instead.
  absl::Status SaveCheckpoint();
  // After this many failed checkpoint writes in a row the failure is logged as an error.
  static constexpr int kLoudCheckpointFailures = 3;

  int64_t step() const { return step_; }  // optimizer steps completed
  absl::Span<const float> params() const { return params_.span(); }
  // The gradient of the last step (summed over peers, before clipping).
  absl::Span<const float> grads() const { return grads_.span(); }
  const model::GptConfig& model_config() const { return gpt_->config(); }
  const optim::AdamW& optimizer() const { return *adam_; }  // not with --zero 1
  // --zero 1: this peer's optimizer (null before the first step and without --zero 1).
  const optim::ShardedAdamW* sharded_optimizer() const { return sharded_adam_.get(); }
  const optim::ShardedAdamW* replica_optimizer() const { return replica_adam_.get(); }
  int slots() const { return sampler_->slots(); }
  // Round sync (--outer-every): the outer state (null with per-step sync; with
  // --outer-after it exists from the start, used from the switch on).
  const sync::RoundSync* round_sync() const { return round_.get(); }
  bool resumed() const { return resumed_; }

 private:
  Trainer() = default;
  absl::Status InitOrResume();
  absl::Status EvaluateUntrained();
  // SaveCheckpoint, where a failure (full disk, I/O error, permissions) is logged and
  // counted (ckpt_failures; an error line from kLoudCheckpointFailures on) and training
  // goes on; the next interval retries. Only the `final` checkpoint's failure (the run
  // ends here) is returned, naming the newest good checkpoint.
  absl::Status CheckpointOrCarryOn(bool final);
  // The periodic checkpoint (--ckpt-every): handed to ckpt_writer_, which reads the
  // live buffers while the next step computes (train/background_checkpoint.h).
  void StartBackgroundCheckpoint();
  // Waits for the background write in flight, if any, and accounts for its result as
  // CheckpointOrCarryOn does for a non-final one (never an error). Called before
  // anything writes params or moments: the optimizer step and a state replacement.
  void FinishBackgroundCheckpoint();
  // ---- Round sync (--outer-every H; trainer_round.cc, sync/round_sync.h) ----
  // Before every step: the mode of this step, per-step sync for step counts below
  // --outer-after N and round sync from N on (from the start without it). A change of
  // mode tells the reducer (GradientReducer::UseRoundSync: its exchange starts afresh).
  // Entering round sync at step count N is the switch, done exactly as a process resumed
  // from a per-step checkpoint of step N with --outer-every would begin (the contract
  // the equality tests hold it to): parameters and AdamW moments as they are, the
  // round-start copy = the parameters, outer momentum zero, nothing pending, the
  // reducer's residuals dropped, round ends at multiples of H. Entering past N (a
  // resumed round-sync checkpoint, a state received from a ring in round sync) keeps the
  // outer state loaded or received. Step counts going back below N (a received older
  // state) return to per-step sync.
  absl::Status SettleSyncMode();
  // One step of a round: the inner step on this peer's slots with its own AdamW and no
  // communication; at a round's end (sync::IsRoundEnd) also the outer step: the
  // token-weighted exchange through the reducer (its codec is --outer-compress), the
  // outer Nesterov update and the param_hash check. An exchange that fails leaves the
  // inner step applied and is redone (among the survivors) without computing it again.
  absl::Status RoundStep(StepMetrics* metrics);
  // This peer's ring position and the ring's member ids (by position), read from the
  // reducer and checked to agree with its peer count; an error names step_ + 1.
  absl::Status RingPosition(int* position, std::vector<int>* members) const;
  // At a round's end, once its step is applied: with --balance on and 2+ peers, every
  // peer's figures of the round (train/round_balancer.h) are gathered exactly and the
  // next round's shares planned from them, the same on every peer; metrics->wait_ms is
  // this peer's idle time at the outer step (the slowest peer's compute of the round
  // minus its own). An error is a broken ring (the next view starts with equal shares)
  // or a peer's figures out of range.
  absl::Status PlanNextRound(StepMetrics* metrics);
  // ---- Overlap (--outer-overlap; sync/round_sync.h "Overlap") ----
  // Whether this round's end must drain (the replicas agree after it): the run's last
  // step, an evaluation or checkpoint due in the round, or a stop or checkpoint vote
  // (`voted`, agreed through the previous round's exchange). The same on every peer.
  bool RoundEndDrains(bool voted) const;
  // After a round's end that launched: the tokens of the round (a small collective),
  // its weighted contribution into RoundSync::exchange() and the exchange begun on the
  // reducer's thread (BeginStep + OnGradReady(0); Finish at the next round's end).
  absl::Status StartPendingExchange();
  // At a round's end with a pending round: its exchange's sum in RoundSync::exchange()
  // (waited for, or redone among this view's peers if it was lost or never began);
  // false if no peer had tokens in it (dropped). *totals: the exchange's totals.
  absl::StatusOr<bool> FinishPendingExchange(StepTotals* totals);
  // The outer step of this round here and now (without overlap: every round's end), and
  // before it the pending round's (`pending_sum`: its sum is in RoundSync::exchange());
  // nothing is applied before both exchanges finished. `voted_checkpoint`: agreed in
  // the pending exchange.
  absl::StatusOr<sync::OuterStepFigures> DrainRound(bool pending_sum, bool voted_checkpoint);
  // Whether the loop may stop, evaluate or checkpoint here: every step with per-step
  // sync; with round sync only at a round's end, where replicas agree.
  bool AtSyncPoint() const;
  // Whether `interval` (--eval-every, --ckpt-every) falls due now: at a multiple of it,
  // or with round sync at the end of the round that passed one.
  bool Due(int interval) const;
  // This peer's vote for a time-based checkpoint (--ckpt-minutes): one is due by its clock.
  bool CheckpointTimeDue() const {
    return config_.ckpt_minutes > 0 && !config_.ckpt_dir.empty() &&
           absl::Now() - last_checkpoint_time_ >= absl::Seconds(config_.ckpt_minutes * 60);
  }
  // This process's resident memory in MB (metrics rss_mb), -1 if /proc cannot say.
  static double ResidentMb();
  // Outer steps done at step count `step` (round ends up to it).
  int64_t OuterStepsAt(int64_t step) const;

  // ---- Sharded outer state (--outer-shard on; trainer_round_shard.cc) ----
  // Before every round-sync step: makes round_'s pieces those of the current ring (its
  // OwnedRanges and ReplicaRanges), moving the round-start copy and the momentum from
  // the members that hold them (GradientReducer::ExchangePieces) at the first step, after
  // a resume and when the ring changed; first completes a staged outer step if the ring
  // resumed after it. Every member of a ring calls it at the same steps. Pieces nobody
  // holds (a peer and its ring predecessor lost together) fail the run with what to do.
  absl::Status SettleOuterPieces();
  // The sharded outer step after the exchange's reduce-scatter (grads_ holds the sum
  // on this peer's pieces): new parameters of the pieces in grads_, the new momentum
  // staged, the pseudo-gradient norm from every owner's part, the allgather of the new
  // parameters, and only then params_, start and momentum change. If the allgather
  // fails, nothing changed and the staged momentum waits for SettleOuterPieces.
  // `keep_start`: no peer trained in the round (DrainRound): the round-start copy's
  // pieces are gathered instead, the momentum unchanged.
  absl::StatusOr<sync::OuterStepFigures> ShardedOuterStep(bool keep_start);
  // At a checkpoint moment of round sync with sharding, every member takes part; a
  // writer (`need`) starts the checkpoint of step_ (sharded_ckpt_: the parameters and
  // AdamW moments, and the outer momentum written into its file as its pieces arrive).
  absl::Status GatherOuterMomentum(bool need);
  // Round sync with sharding's checkpoint moments need the gather (round mode, past
  // --outer-after's switch).
  bool ShardedOuterCheckpoint() const;

  // ---- ZeRO-1 (--zero 1; trainer_zero.cc) ----
  // Before a step: settles a step whose update did not reach this peer (kept if the
  // ring resumed after it, dropped if before), then makes this peer's optimizers match
  // the pieces of the current ring, moving them from the members that hold them
  // (GradientReducer::ExchangePieces) when the ring changed, at the first step, or
  // after a resume. An error fails the step (redone in the next view); state lost for
  // good (two ring neighbours gone at once) takes the ring back to the newest checkpoint
  // a member holds (RewindToNewestCheckpoint).
  absl::Status SettleShardedState();
  // The optimizer step of a sharded ring, undoable until the updated parameters have
  // reached this peer: stages the new parameters of its pieces in grads_, allgathers
  // them there, and only then moves the moments on and copies grads_ into params_. If
  // the allgather fails, params and moments are untouched and `pending_` keeps what
  // finishes the step should the ring resume after it (SettleShardedState).
  absl::Status ShardedUpdate(float lr, float clip_scale);
  // SettleShardedState found pieces nobody holds: every member goes back to the newest
  // checkpoint any member holds (parameters and moments sent from its holders), logged;
  // Internal if there is none.
  absl::Status RewindToNewestCheckpoint(const std::vector<optim::FloatRange>& lost);
  // `range` of a float section of a checkpoint opened (and verified) earlier, into
  // *scratch; a file that changed since aborts with the reason (the ring would
  // otherwise receive wrong values).
  static absl::Span<const float> ReadFromCheckpoint(const ckpt::Checkpoint& from,
                                                    const char* section, optim::FloatRange range,
                                                    std::vector<float>* scratch);
  // At a checkpoint moment every member of a sharded ring takes part; a member that
  // writes (`need`) starts the checkpoint of step_ (sharded_ckpt_: the parameters, and
  // the moments written into its files as their pieces arrive, never all in memory).
  // A failure to start it (a full disk, a stale writer) is logged like a failed write
  // and this member then takes part needing nothing.
  absl::Status GatherMomentsForCheckpoint(bool need);
  // Whether this step count is a checkpoint moment of the ring (--ckpt-every, or the end).
  bool IsCheckpointMoment(bool last, bool stop) const;
  // This peer's held ranges of the moments (valid at step_), in order.
  std::vector<optim::FloatRange> HeldMomentRanges() const;
  // The moment floats [range) of buffer b (0 = m, 1 = v) this peer holds (live
  // optimizers, the resumed checkpoint, or zeros at step 0).
  absl::Span<const float> ReadHeldMoments(int b, optim::FloatRange range);

  // The epoch a checkpoint of this peer carries: the view's, or the resumed
  // checkpoint's if that is newer (a ring's checkpoint resumed by one peer alone).
  uint64_t CheckpointEpoch() const;
  // SaveTrainCheckpoint of the current buffers as step `step` (any thread).
  absl::Status WriteCheckpoint(int64_t step, uint64_t epoch) const;
  // The meta of a checkpoint of this run at `step`.
  ckpt::CheckpointMeta CheckpointMetaAt(int64_t step, uint64_t epoch) const;
  // The gather that GatherMomentsForCheckpoint and GatherOuterMomentum share, for a
  // ring whose state is in pieces (no peer holds it whole): every member takes part in
  // one GradientReducer::ExchangePieces of sections.size() buffers of params_.size()
  // floats, offering `held` through `read` (see there). A writer (`need`) starts the
  // checkpoint of step_ with `begin` and needs every buffer whole: buffer b's pieces are
  // written into section sections[b] of its file as they arrive (never whole in memory),
  // and the builder is kept in sharded_ckpt_ for WriteCheckpoint to finish. A failure
  // to start it (a full disk, a stale writer) is logged like a failed write and this
  // member then takes part needing nothing. Pieces that no member holds: Internal,
  // "step S: gathering `what` for a checkpoint: N ranges held by no member".
  absl::Status GatherPiecesForCheckpoint(
      bool need,
      absl::FunctionRef<absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>>()> begin,
      absl::Span<const char* const> sections, const std::vector<optim::FloatRange>& held,
      const collective::PieceReader& read, const char* what);
  // A finished write of `step`: the status board hears of it; success advances
  // last/good_checkpoint_step_ and is logged.
  void RecordCheckpoint(int64_t step, const absl::Status& s, double write_ms, bool background);
  // RecordCheckpoint, then CarryOn: a background write's result (never final).
  void AccountCheckpoint(const BackgroundCheckpoint::Result& r);
  // After a write of `step`: AlreadyExists (another writer was first) and success are
  // fine; a failure is counted in ckpt_failures_, logged (loudly from
  // kLoudCheckpointFailures on) and returned only if `final`.
  absl::Status CarryOn(int64_t step, const absl::Status& s, bool final);
  absl::Status CheckpointFailed(int64_t step, const absl::Status& s, bool final);
  void PrintStep(const StepMetrics& m) const;
  // The step line, --metrics and the status board.
  absl::Status ReportStep(const StepMetrics& m);

  TrainConfig config_;
  std::unique_ptr<GradientReducer> reducer_;
  std::optional<data::TokenDataset> train_data_, val_data_;
  std::optional<data::BatchSampler> sampler_;
  std::optional<SlotBalancer> balancer_;  // shares of the global batch (--balance)
  // Round sync: the shares of the inner steps, planned at each outer step (--balance).
  std::optional<RoundBalancer> round_balancer_;
  uint64_t balancer_epoch_ = 0;  // the view epoch the balancer's figures belong to
  std::unique_ptr<model::Gpt> gpt_;
  AlignedBuffer<float> params_, grads_;
  std::unique_ptr<optim::AdamW> adam_;
  // --outer-every H > 0: the round-start copy, the outer momentum, this round's tokens.
  std::unique_ptr<sync::RoundSync> round_;
  bool round_mode_ = false;  // SettleSyncMode: the steps are round sync's now
  // Overlap: the pending round's exchange runs on the reducer of view `exchange_epoch_`
  // (begun, not finished); the reducer's bytes_sent() when it began.
  bool exchange_live_ = false;
  uint64_t exchange_epoch_ = 0;
  uint64_t exchange_bytes_base_ = 0;
  // --outer-shard on: the outer step count (OuterStepsAt) at which round_'s pieces hold
  // the ring's values (-1: they do not), the view epoch of their cut, whether the
  // momentum is known to be zero everywhere (step 0, --outer-after's switch), a staged
  // outer step (the count it completes, -1 = none, and its momentum).
  int64_t outer_held_ = -1;
  int64_t began_at_ = -1;  // step_ once Create took the ring's state
  uint64_t outer_epoch_ = 0;
  bool outer_zero_ = false;
  int64_t outer_staged_at_ = -1;
  AlignedBuffer<float> outer_staged_;
  // --zero 1 (GradientReducer::ShardsOptimizer): the optimizer of this peer's pieces,
  // made at the first step (the pieces are known after BeginStep); adam_ is then null.
  std::unique_ptr<optim::ShardedAdamW> sharded_adam_;
  // --zero 1: the second copy of the predecessor's pieces' state (ReplicaRanges),
  // stepped like its owner's; null alone.
  std::unique_ptr<optim::ShardedAdamW> replica_adam_;
  // --zero 1: a step whose update did not reach this peer (ShardedUpdate): the step
  // count it completes (-1 = none), its clipping scale and the packed gradients of the
  // owned and replica pieces it would move the moments on with.
  struct PendingShardedStep {
    int64_t step = -1;
    float grad_scale = 1.0f;
    AlignedBuffer<float> owned, replica;
  };
  PendingShardedStep pending_;
  // --zero 1: the step count at which the optimizers' moments are valid (-1: they are
  // not; a state fetched from another peer has none), and the view epoch whose pieces
  // they hold.
  int64_t moments_step_ = -1;
  uint64_t sharded_epoch_ = 0;
  // --zero 1 resumed from a checkpoint: its full moments are read from disk on demand
  // (only the pieces this peer needs are ever in memory).
  std::optional<ckpt::Checkpoint> resumed_checkpoint_;
  // --zero 1 (and --outer-shard on) writers: the checkpoint of sharded_ckpt_step_ being built
  // (parameters and moments in place; the writer adds the rest and publishes it). Shared with the
  // writer thread's closure.
  std::shared_ptr<ckpt::CheckpointBuilder> sharded_ckpt_;
  int64_t sharded_ckpt_step_ = -1;
  std::vector<float> read_scratch_[2];  // ReadHeldMoments' disk reads and zeros
  // First step whose update is preconditioned (top-k; GradientReducer::PreconditionFrom),
  // -1 = never. AdamW's second moment is frozen as it was after this many steps.
  int64_t precondition_from_ = -1;
  std::optional<MetricsWriter> metrics_;
  std::shared_ptr<observe::StatusBoard> board_;  // null without --http / --events
  std::vector<uint64_t> eval_starts_;
  std::string tokenizer_model_;  // bytes of the data's tokenizer.model ("" if none)
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t last_checkpoint_step_ = -1;  // the step last written or resumed (no rewrite)
  // --ckpt-minutes: when this peer last passed a checkpoint moment (or started), and
  // whether the peers agreed in the last step's sum that one is due now.
  absl::Time last_checkpoint_time_ = absl::Now();
  bool checkpoint_agreed_ = false;
  int64_t good_checkpoint_step_ = -1;  // the newest step this peer wrote or resumed from
  int ckpt_failures_ = 0;              // consecutive failed checkpoint writes
  uint64_t loaded_epoch_ = 0;          // view epoch of the checkpoint resumed from
  bool resumed_ = false;
  // Last member: destroyed first, it waits for a write that still reads the buffers.
  BackgroundCheckpoint ckpt_writer_;
};

}  // namespace rt::train
