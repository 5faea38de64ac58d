// GradientReducer: the seam between the training loop and the ring.
//
// The loop (trainer.cc) accumulates this peer's gradients for one optimizer step and
// hands them to a reducer; when Finish() returns, the gradient buffer holds the sum
// over all peers (each peer scales its contribution by 1 / tokens of the global step,
// so the sum is the global mean; DESIGN invariant 3). The single-peer reducer does
// nothing. A ring reducer starts sending buckets from OnGradReady while backward is
// still running (overlap), and waits in Finish.
//
// Call order per optimizer step, all on the training thread:
//   BeginStep(step, grads) -> [micro-steps; during the LAST one OnGradReady(o) with o
//   decreasing to 0; if this peer has no slots, one OnGradReady(0)] -> Finish(&totals).
//
// Elastic reducers (train/elastic_reducer.h: membership, views, state transfer) also
// use the step-boundary hooks at the end of the class; their defaults describe a
// fixed ring (nothing to wait for, every failure is fatal). The loop calls, per step:
//   AtStepBoundary() [kStop: checkpoint if WritesCheckpoints(), return] -> the step
//   above (StepAborted() is polled between micro-batches) -> StepCompleted(step) if
//   the step was applied -> on an error StepFailed(error) (OK: redo from the
//   boundary) -> after a completed step, StopAfterThisStep() (an agreed stop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collective/codec_spec.h"
#include "collective/piece_exchange.h"
#include "observe/peer_report.h"
#include "optim/grad_clip.h"
#include "train/stop_signals.h"

namespace rt::train {

// Per-step scalars summed over peers alongside the gradients.
struct StepTotals {
  double loss_sum = 0;  // sum of per-token cross-entropy (nats) over the tokens below
  int64_t tokens = 0;   // target tokens trained on in this step
  // Load balancing (train/slot_balancer.h). In: this peer's compute seconds of the
  // step (forward+backward, no waits) and the slots it trained. Out (filled by
  // Finish): every ring position's figures, indexed by position; exact, so identical
  // on every peer.
  double compute_s = 0;
  int slots = 0;
  std::vector<double> peer_compute_s;
  std::vector<int> peer_slots;
  // Time-based checkpoints (--ckpt-minutes). In: this peer finds one due. Out: some peer
  // did, so every peer checkpoints after this step (an elastic ring sums the votes
  // exactly, so all peers agree; one peer alone keeps its own vote).
  bool checkpoint_vote = false;
};

// The trainer's state as elastic hooks see it: served to peers that are behind, and
// replaced by a fetched copy. `step` is the number of optimizer steps completed,
// which is also the data position (data/batch_sampler.h); `buffers` are the named
// flat fp32 buffers (params, adam_m, adam_v), the same lengths on every peer.
struct TrainStateRef {
  int64_t* step = nullptr;
  std::vector<std::pair<std::string, absl::Span<float>>> buffers;
  // Called (on the training thread) right before the buffers are overwritten with a
  // received state: the trainer finishes a checkpoint that still reads them. May be empty.
  std::function<void()> before_overwrite;
};

// What the loop does at a step boundary.
enum class BoundaryAction {
  kTrain,  // take the next step
  kStop,   // stop cleanly now (signalled, or this peer left the job): exit 0
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;

  // This peer's position among the peers of the current step (BatchSampler::SlotsOf).
  virtual int rank() const = 0;
  virtual int peers() const = 0;
  // The peers' ids in ring position order (the same vector on every peer; stable
  // while the view lasts, e.g. node ranks): what load balancing keys speeds by.
  virtual std::vector<int> member_ids() const {
    std::vector<int> ids(static_cast<size_t>(peers()));
    for (int p = 0; p < peers(); ++p) ids[p] = p;
    return ids;
  }
  // Cluster view: epoch (grows on every membership change) and the leader's
  // hosts-file rank (a fixed ring: 0, the peer at ring position 0).
  virtual uint64_t epoch() const { return 0; }
  virtual int leader() const { return 0; }

  // Optimizer step `step` (0-based) begins; `grads` (the whole flat gradient buffer)
  // stays valid and is written only by the loop until Finish returns.
  virtual absl::Status BeginStep(int64_t step, absl::Span<float> grads) = 0;
  // grads[offset, grads.size()) are final on this peer for this step. Must return
  // quickly (it runs between backward layers).
  virtual void OnGradReady(size_t offset) = 0;
  // Waits until grads hold the sum over all peers; *totals goes in as this peer's and
  // comes out as the sum over all peers.
  virtual absl::Status Finish(StepTotals* totals) = 0;

  // Replicas must be bit-identical (DESIGN invariant 2): a ring reducer compares the
  // hashes of all peers and returns an error naming the peers that differ.
  virtual absl::Status CheckParamHash(int64_t /*step*/, uint64_t /*param_hash*/) {
    return absl::OkStatus();
  }
  // Makes every peer start from the leader's state: after this returns, *step and
  // the `state` spans (params, optimizer moments; the same lengths on every peer)
  // hold the leader's values bit for bit. Called once by Trainer::Create after
  // initialisation or resume, so peers that resumed from different (or no)
  // checkpoints still start identical.
  virtual absl::Status SyncState(int64_t* /*step*/,
                                 const std::vector<absl::Span<float>>& /*state*/) {
    return absl::OkStatus();
  }
  // Preconditioned top-k (optim/adamw.h "Preconditioned steps"): the first optimizer
  // step (0-based) from which the loop must hand this reducer preconditioned
  // gradients' sum, i.e. freeze AdamW's second moment and step with
  // AdamW::StepPreconditioned; -1 = never (dense, bf16, auto, or top-k without a
  // warm-up). Fixed for the whole run and equal on every peer.
  virtual int64_t PreconditionFrom() const { return -1; }
  // Called once by Trainer::Create when PreconditionFrom() >= 0: from that step on the
  // reducer passes every bucket of this peer's gradient to `fn` (on its communication
  // thread; `offset` is the bucket's position in the whole buffer) before compressing it.
  virtual void SetPreconditioner(std::function<void(absl::Span<float>, size_t offset)> /*fn*/) {}
  // Preconditioned steps: the [begin, end) float ranges of the gradient buffer whose
  // sum in the last finished step covers every coordinate (exchanged dense or bf16;
  // not top-k), sorted and disjoint, the same on every peer; AdamW's
  // frozen second moment goes on learning there (optim/adamw.h StepPreconditioned). Default: none.
  virtual std::vector<std::pair<size_t, size_t>> DenseSumRanges() const { return {}; }
  // Preconditioned steps: the ranges whose last sum was a top-k refresh step's exact
  // gradient (--topk-refresh; AdamW's v learns there but the step stays top-k's:
  // optim/adamw.h StepPreconditioned `refreshed`). Sorted, disjoint, disjoint from
  // DenseSumRanges, the same on every peer. Default: none.
  virtual std::vector<std::pair<size_t, size_t>> RefreshedRanges() const { return {}; }
  // ---- ZeRO stage 1 (RingReducerOptions::shard_optimizer; optim/sharded_adamw.h) ----
  // Whether this peer updates only OwnedRanges of the parameters: Finish then leaves
  // the summed gradient in those ranges only (a reduce-scatter), and the loop applies
  // the optimizer there and calls AllgatherOwned. Fixed for the reducer's life.
  virtual bool ShardsOptimizer() const { return false; }
  // The [begin, end) ranges of a `length`-float buffer whose update this peer computes,
  // sorted and disjoint (read after BeginStep). Default: all of it.
  virtual std::vector<std::pair<size_t, size_t>> OwnedRanges(size_t length) const {
    return {{0, length}};
  }
  // The ranges whose optimizer state this peer keeps as a second copy (of its ring
  // predecessor's OwnedRanges), so that one lost peer loses no optimizer state: Finish
  // leaves the summed gradient there too, and the loop steps a replica optimizer on
  // them exactly as their owner does. Sorted, disjoint; default: none.
  virtual std::vector<std::pair<size_t, size_t>> ReplicaRanges(size_t /*length*/) const {
    return {};
  }
  // After Finish: the sum of squares of the summed gradient over the whole buffer (for
  // the global clipping norm), in an order that does not depend on sharding, so a
  // sharded and an unsharded ring get the same bits. Sharded: only OwnedRanges of
  // `grads` are read; the other parts come from their owners (a collective).
  virtual absl::StatusOr<double> GradSumOfSquares(absl::Span<const float> grads) {
    return optim::SumOfSquares(grads);
  }
  // Sharded, after the optimizer step: every peer's OwnedRanges of `params` reach every
  // other peer (an allgather), so all replicas hold the whole update. Default: nothing.
  virtual absl::Status AllgatherOwned(absl::Span<float> /*params*/) { return absl::OkStatus(); }
  // Between steps (after AtStepBoundary, before BeginStep): moves ranges of the
  // sharded optimizer state from the members that hold them to the members that need
  // them (collective::ExchangePieces; every member of the ring calls it with the same
  // length and buffers; see there for held, needed, read, write and the result). Used
  // when the ring changed (new pieces), at resume and to gather the moments for a
  // checkpoint. Default (one peer): local copies only; parts not held are lost.
  virtual absl::StatusOr<collective::PieceExchangeResult> ExchangePieces(
      size_t length, int buffers, const std::vector<collective::FloatRange>& held,
      const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
      const collective::PieceWriter& write);
  // Between steps: every member's `mine`, indexed by ring position (a small
  // collective; the same vector on every member). Default (one peer): {mine}.
  virtual absl::StatusOr<std::vector<int64_t>> AllgatherInt64(int64_t mine) {
    return std::vector<int64_t>{mine};
  }
  // Between steps: every member's `mine` (the same count of values on every member),
  // indexed by ring position: AllgatherInt64 for several values in one pass.
  virtual absl::StatusOr<std::vector<std::vector<int64_t>>> AllgatherInt64s(
      absl::Span<const int64_t> mine) {
    return std::vector<std::vector<int64_t>>{std::vector<int64_t>(mine.begin(), mine.end())};
  }
  // The trainer went back to the state of step count `step` (a checkpoint, after state
  // was lost for good); an elastic ring reports that version from now on.
  virtual void StateRewound(int64_t /*step*/) {}
  // Payload bytes this peer has sent so far (for metrics).
  virtual uint64_t bytes_sent() const { return 0; }
  // This peer's outgoing links as its last link probe measured them (to HOST:PORT,
  // bytes/s, round trip in s), for the status board. Default / before a probe: none.
  virtual std::vector<observe::LinkFigure> ProbedLinks() const { return {}; }

  // ---- step-boundary hooks (elastic rings; see the file comment) ----
  // Called once by Trainer::Create after initialisation or resume (before SyncState).
  // `loaded_epoch` is the view epoch of the checkpoint loaded (0 if none).
  virtual absl::Status AttachState(const TrainStateRef& /*state*/, uint64_t /*loaded_epoch*/) {
    return absl::OkStatus();
  }
  // Before every step. May block (bounded) while the cluster changes and may replace
  // the attached state (this peer was behind and received the agreed one).
  virtual absl::StatusOr<BoundaryAction> AtStepBoundary() { return BoundaryAction::kTrain; }
  // True once the step in flight is known to be lost (a view change): the loop stops
  // computing it and fails it (Aborted).
  virtual bool StepAborted() const { return false; }
  // The step in flight failed with `error`. OK means the cluster is changing and the
  // loop must go back to AtStepBoundary and redo it; otherwise the error is fatal.
  virtual absl::Status StepFailed(const absl::Status& error) { return error; }
  // The loop completed (applied) optimizer step `step` (1-based count of steps done).
  // A ring reducer makes that step's error-feedback residuals final here; a step that
  // began but was never completed is undone at the next BeginStep
  // (collective/bucketed_reducer.h "Steps that are not applied").
  virtual void StepCompleted(int64_t /*step*/) {}
  // The exchange that last finished is final for error feedback now, although its step
  // is not completed yet (round sync drains two exchanges in one step: the second's
  // BeginStep would otherwise undo the first's residuals). Default: nothing to keep.
  virtual void CommitExchange() {}
  // Round sync: an inner step (between outer steps, replicas differ) was applied. As
  // StepCompleted, except that an elastic ring admits joiners (and drops removed hosts)
  // only at outer steps, where every peer holds the same shared parameters.
  virtual void InnerStepCompleted(int64_t step) { StepCompleted(step); }
  // Round sync (--outer-every; --outer-after switches to it inside the run): between
  // steps, the exchanges from the next BeginStep on are round sync's outer ones, summed
  // with `outer_codec`, or (nullopt) per-step gradient exchanges again. A change of
  // mode starts the exchange afresh, as a new process resumed at this step would: this
  // peer's error-feedback residuals are dropped and the buckets take the mode's codec;
  // the outer exchange has no top-k warm-up, preconditioning or auto codec, and
  // param_hash is compared at every one. An elastic ring keeps the mode for the
  // reducers of later views (their residuals carried within the mode). Called with the
  // mode in force: nothing happens. Error during a step. Default (one peer): nothing.
  // `shard` (--outer-shard on; codec none): the outer exchange is reduce-scattered as
  // ZeRO-1's gradients are (OwnedRanges, ReplicaRanges, AllgatherOwned and
  // ExchangePieces then work as with ShardsOptimizer, which stays false: the inner
  // steps' AdamW is whole) and the ring keeps its order.
  virtual absl::Status UseRoundSync(std::optional<collective::CodecSpec> /*outer_codec*/,
                                    bool /*shard*/) {
    return absl::OkStatus();
  }
  // After a completed step: every peer agreed to stop here (one was signalled).
  virtual bool StopAfterThisStep() const { return false; }
  // Any thread, idempotent: make the step in flight (and any later call) fail
  // promptly with `why`; afterwards the reducer is only destroyed. An elastic ring
  // calls it on its per-view reducer when the view changes.
  virtual void Abort(const absl::Status& /*why*/) {}
  // Whether this peer writes checkpoints of the current view (the leader; with an
  // elastic ring also the leader's successor, as a second copy).
  virtual bool WritesCheckpoints() const { return rank() == leader(); }
};

// One peer alone: gradients are already the global sum. With `watch_signals`, a
// SIGTERM/SIGINT (train/stop_signals.h) stops the run after the step in flight,
// with a checkpoint, as it stops a ring.
class LocalGradientReducer final : public GradientReducer {
 public:
  explicit LocalGradientReducer(bool watch_signals = false) : watch_signals_(watch_signals) {}
  int rank() const override { return 0; }
  int peers() const override { return 1; }
  absl::Status BeginStep(int64_t, absl::Span<float>) override { return absl::OkStatus(); }
  void OnGradReady(size_t) override {}
  absl::Status Finish(StepTotals* totals) override {
    totals->peer_compute_s = {totals->compute_s};
    totals->peer_slots = {totals->slots};
    return absl::OkStatus();
  }
  bool StopAfterThisStep() const override { return watch_signals_ && StopRequested(); }

 private:
  bool watch_signals_;
};

}  // namespace rt::train
