// ElasticReducer: the GradientReducer of `train --hosts`, a fault-tolerant ring
// without a master (DESIGN invariants 2-5).
//
// DESIGN. One net::TcpNode per peer carries everything: the control links of a
// cluster::MembershipService (heartbeats, views, on their own thread), the ring of
// each view (TcpRing::Form on RingChannel(view)) and state transfers
// (StateChannel(epoch)). The training loop consults this reducer at every step
// boundary (gradient_reducer.h); all cluster work happens there, on the training
// thread, so the loop itself stays the single-peer loop:
//   AtStepBoundary: drains membership decisions; without a ring it waits (bounded by
//     `wait`, logging why) for kInstallView. On an install: drop the old ring; the
//     agreement's source serves its state (ServeAgreedState) to the members that are
//     behind; a member behind fetches the agreed state (FetchAgreedState: step,
//     params, AdamW moments; the data position is the step) and reports SetState, or
//     StateTransferFailed; then the ring of the view forms and `make_reducer` wraps it
//     (a RingGradientReducer); a formation is given up as soon as a newer decision
//     arrives (a member died meanwhile). kPause/kStopTraining drop the ring; kExcluded discards
//     the state (reports "no state") so the next view sends a fresh copy; kLeave
//     stops cleanly.
//   Abort: decisions are also seen on the control thread (on_decision): a view change
//     aborts the view's reducer (GradientReducer::Abort fails its ring's connections,
//     also of a probe or re-form in progress), so the collective in flight returns
//     promptly, StepAborted() stops the micro-batches, and the loop redoes the step in
//     the next view (at most the interrupted step is lost). A ring failure the
//     membership did not announce (e.g. one broken ring link) is reported after
//     `peer_timeout_ms` as a disrupted view (StateTransferFailed with the unchanged
//     state), which makes the leader propose a new one.
//   Steps: StepCompleted(step) after every applied step (admissions of joiners happen
//     at these boundaries; round sync's inner steps report InnerStepCompleted, so
//     joiners come in at outer steps); Internal errors (replicas diverged, token count mismatch)
//     stay fatal; kMaxConsecutiveFailures failed steps in a row are fatal too.
//   Stop: a signalled peer (stop_signals.h) votes in every step it finishes: the vote
//     rides in the high bits of the exactly-summed token count (kStopVote), so every
//     peer that completes step S learns the same verdict and all stop after S; the
//     leader (and its successor, unless ckpt_shared) checkpoints, all exit 0. A
//     signalled peer that is not in a training ring announces Leave and stops alone.
//   End: after the step that completes --steps, or an agreed stop, the peer announces
//     Leave with that step (Membership "Ending"): the others stop expecting it, log
//     "peer X finished training at step S" and leave the same way after their step S.
//   Settings: kConfigMismatch (this peer's fingerprint differs from the one most peers
//     that answered run) ends training with that difference as the error.
//   Checkpoint duty: cluster::CheckpointDutyOf(view of the last step, self); the
//     successor's copy is skipped when the leader's marker is live in its --ckpt-dir
//     (a shared directory detected: ckpt_dir_shared_with).
//
// rank()/peers() are the ring position and size in the current view (1 peer before
// the first view); epoch() the view's epoch; leader() the leader's hosts-file rank.
// Thread-safety: like every GradientReducer, call it from the training thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/membership_service.h"
#include "cluster/state_transfer.h"
#include "cluster/view.h"
#include "net/tcp_node.h"
#include "net/tcp_ring.h"
#include "observe/status_board.h"
#include "observe/status_channel.h"
#include "train/gradient_reducer.h"

namespace rt::train {

struct ElasticOptions {
  std::shared_ptr<net::TcpNode> node;  // started; shared by control, rings and transfers
  int min_peers = 0;                   // --min-peers (0: a majority of the hosts file)
  int64_t peer_timeout_ms = 3000;      // --peer-timeout: a silent peer is suspected after this
  int64_t startup_grace_ms = 10000;    // at start, wait this long for every host
  // Longest time without a training view (no quorum, waiting to be admitted) before
  // the peer gives up with an error naming why; also bounds a ring formation that
  // waits for a state transfer. --wait.
  absl::Duration wait = absl::Seconds(120);
  bool ckpt_shared = false;  // --ckpt-shared: only the leader writes checkpoints
  // Without --ckpt-shared: true if `leader` writes into this peer's --ckpt-dir too (its
  // marker is live there: ckpt/peer_marker.h), so the copy would land next to the
  // original; the copy is then skipped, as with --ckpt-shared, with a warning. Null:
  // never.
  std::function<bool(const cluster::PeerId& leader)> ckpt_dir_shared_with;
  // --steps: after completing it (or an agreed stop) this peer tells the members that
  // the job ends there (a clean leave: they log "peer X finished ..." and finish too,
  // instead of suspecting it when it exits). 0: never announced.
  int64_t steps = 0;
  std::string hosts_path;     // re-read on SIGHUP ("" = never)
  bool watch_signals = true;  // read stop_signals.h (tests may turn it off)
  cluster::TransferOptions transfer;
  // Wraps the formed ring of `view` into the reducer of that view.
  std::function<absl::StatusOr<std::unique_ptr<GradientReducer>>(std::unique_ptr<net::TcpRing>,
                                                                 const cluster::View&)>
      make_reducer;
  // What every view's reducer reports as PreconditionFrom() (the same options build
  // them); known here before the first view exists.
  int64_t precondition_from = -1;
  // --zero 1: every view's reducer shards the optimizer (RingReducerOptions::
  // shard_optimizer); known here before the first view exists.
  bool shard_optimizer = false;
  // Optional: told every membership decision; its reports ride on this
  // peer's heartbeats and it reads the cluster from the membership.
  std::shared_ptr<observe::StatusBoard> board;
};

class ElasticReducer final : public GradientReducer {
 public:
  // A stop vote: added to StepTotals::tokens by a signalled peer (a step never has
  // 2^40 tokens), so the exact sum carries the number of votes in its high bits.
  static constexpr int64_t kStopVote = int64_t{1} << 40;
  // A checkpoint vote (StepTotals::checkpoint_vote), above the stop votes (fewer than
  // 2^10 peers each): any vote makes every peer checkpoint after the step.
  static constexpr int64_t kCheckpointVote = int64_t{1} << 50;
  static constexpr int kMaxConsecutiveFailures = 20;

  // Checks the options; the membership starts at AttachState (it must report the
  // state this peer loaded).
  static absl::StatusOr<std::unique_ptr<ElasticReducer>> Create(ElasticOptions options);
  ~ElasticReducer() override;

  // The position in the view's ring as it is now: a probe may re-order the ring
  // inside BeginStep (ring_gradient_reducer.h), so read it after BeginStep.
  int rank() const override { return inner_ ? inner_->rank() : position_; }
  int peers() const override { return size_; }
  std::vector<int> member_ids() const override {
    return inner_ ? inner_->member_ids() : std::vector<int>{options_.node->self_rank()};
  }
  uint64_t epoch() const override { return view_.epoch; }
  int leader() const override { return leader_rank_; }
  int host_rank() const { return options_.node->self_rank(); }
  const cluster::View& view() const { return view_; }

  absl::Status BeginStep(int64_t step, absl::Span<float> grads) override;
  void OnGradReady(size_t offset) override;
  absl::Status Finish(StepTotals* totals) override;
  absl::Status CheckParamHash(int64_t step, uint64_t param_hash) override;
  uint64_t bytes_sent() const override;
  int64_t PreconditionFrom() const override { return options_.precondition_from; }
  // Kept and handed to the reducer of every view.
  void SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn) override {
    preconditioner_ = std::move(fn);
    if (inner_) inner_->SetPreconditioner(preconditioner_);
  }
  std::vector<observe::LinkFigure> ProbedLinks() const override {
    return inner_ ? inner_->ProbedLinks() : std::vector<observe::LinkFigure>();
  }
  std::vector<std::pair<size_t, size_t>> DenseSumRanges() const override {
    return inner_ ? inner_->DenseSumRanges() : std::vector<std::pair<size_t, size_t>>();
  }
  std::vector<std::pair<size_t, size_t>> RefreshedRanges() const override {
    return inner_ ? inner_->RefreshedRanges() : std::vector<std::pair<size_t, size_t>>();
  }
  // ZeRO-1: the view's reducer does the work; without a ring there are no pieces.
  bool ShardsOptimizer() const override { return options_.shard_optimizer; }
  std::vector<std::pair<size_t, size_t>> OwnedRanges(size_t length) const override {
    return inner_ ? inner_->OwnedRanges(length) : GradientReducer::OwnedRanges(length);
  }
  std::vector<std::pair<size_t, size_t>> ReplicaRanges(size_t length) const override {
    return inner_ ? inner_->ReplicaRanges(length) : std::vector<std::pair<size_t, size_t>>();
  }
  absl::StatusOr<double> GradSumOfSquares(absl::Span<const float> grads) override;
  absl::Status AllgatherOwned(absl::Span<float> params) override;
  absl::StatusOr<std::vector<int64_t>> AllgatherInt64(int64_t mine) override {
    if (!inner_) return absl::UnavailableError("no ring: the view changed before the step began");
    return inner_->AllgatherInt64(mine);
  }
  absl::StatusOr<std::vector<std::vector<int64_t>>> AllgatherInt64s(
      absl::Span<const int64_t> mine) override {
    if (!inner_) return absl::UnavailableError("no ring: the view changed before the step began");
    return inner_->AllgatherInt64s(mine);
  }
  // The membership hears of the older state this peer now holds (same epoch).
  void StateRewound(int64_t step) override;
  absl::StatusOr<collective::PieceExchangeResult> ExchangePieces(
      size_t length, int buffers, const std::vector<collective::FloatRange>& held,
      const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
      const collective::PieceWriter& write) override;

  absl::Status AttachState(const TrainStateRef& state, uint64_t loaded_epoch) override;
  absl::StatusOr<BoundaryAction> AtStepBoundary() override;
  bool StepAborted() const override { return aborted_.load(); }
  absl::Status StepFailed(const absl::Status& error) override;
  void StepCompleted(int64_t step) override { Completed(step, /*boundary=*/true); }
  void InnerStepCompleted(int64_t step) override { Completed(step, /*boundary=*/false); }
  void CommitExchange() override {
    if (inner_) inner_->CommitExchange();
  }
  // Kept and applied to the reducer of every later view (whose residuals, within the
  // mode, are carried as ever).
  absl::Status UseRoundSync(std::optional<collective::CodecSpec> outer_codec, bool shard) override {
    outer_codec_ = outer_codec;
    outer_shard_ = shard;
    return inner_ ? inner_->UseRoundSync(outer_codec, shard) : absl::OkStatus();
  }
  bool StopAfterThisStep() const override { return stop_after_step_; }
  bool WritesCheckpoints() const override;

  // The state version this peer holds (what it reports to the membership).
  cluster::StateVersion version() const { return version_; }

 private:
  explicit ElasticReducer(ElasticOptions options);
  void OnDecision(const cluster::Decision& d);  // control thread
  absl::Status Handle(const cluster::Decision& d);
  absl::Status Install(const cluster::Decision& d);
  absl::Status LoadSnapshot(const cluster::StateSnapshot& snap);
  cluster::StateSource Snapshot();
  void DropRing(const std::string& why);
  // A step was applied; `boundary`: the membership may admit joiners now (every step of
  // per-step sync, outer steps of round sync), else it only learns the new version.
  void Completed(int64_t step, bool boundary);
  // TcpRing::Form on a helper thread, given up (Cancelled) as soon as a decision that
  // changes the view arrives (it goes to pending_), so no peer sits in a formation
  // the cluster has left behind. A formation given up is cancelled and joined (within
  // ~100 ms): no thread of it outlives the call.
  absl::StatusOr<std::unique_ptr<net::TcpRing>> FormRing(std::vector<int> order, uint64_t channel,
                                                         absl::Duration wait);
  // The membership's view of the cluster for the status board (any thread).
  observe::ClusterFacts Facts() const;
  // pending_ first, then the service's queue.
  std::optional<cluster::Decision> NextDecision(absl::Duration timeout);
  void MaybeReloadHosts();

  ElasticOptions options_;
  std::unique_ptr<cluster::MembershipService> service_;
  std::unique_ptr<observe::StatusResponder> status_responder_;  // with options_.board
  cluster::PeerId self_;
  TrainStateRef state_;
  std::deque<cluster::Decision> pending_;  // taken from the service, not handled yet
  cluster::StateVersion version_{0, -1};
  uint8_t step_bytes_[8] = {};  // the "step" section while serving

  cluster::View view_;  // the view of the current (or last) ring
  int position_ = 0, size_ = 1, leader_rank_ = 0;
  std::unique_ptr<GradientReducer> inner_;  // the ring reducer of view_; null = no ring
  std::function<void(absl::Span<float>, size_t)> preconditioner_;  // for every view's reducer
  std::optional<collective::CodecSpec> outer_codec_;  // UseRoundSync's, for every view's reducer
  bool outer_shard_ = false;                          // likewise
  uint64_t bytes_before_ = 0;                         // sent by the rings of earlier views

  // Shared with the control thread (abort on a view change).
  std::mutex ring_mu_;
  GradientReducer* live_ = nullptr;  // inner_ while it may be aborted
  uint64_t live_epoch_ = 0;          // the epoch of live_'s view
  std::atomic<bool> aborted_{false};

  bool stop_after_step_ = false;
  bool left_ = false;     // stop at the boundary (kLeave, or signalled outside a ring)
  bool removed_ = false;  // kLeave: removed from the hosts file
  int consecutive_failures_ = 0;
  int64_t failed_at_ms_ = -1;    // an unexplained step failure: report it if no view change
  int64_t last_step_ms_ = -1;    // when the last step completed (for "seconds lost")
  int64_t last_step_done_ = -1;  // the highest step count this peer completed
  mutable cluster::PeerId shared_with_warned_;  // the leader last warned about (a shared dir)
};

}  // namespace rt::train
