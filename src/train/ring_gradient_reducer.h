// RingGradientReducer: the GradientReducer of a ring of peers.
//
// Gradients go through collective::BucketedReducer: buckets cut from the end of the
// flat buffer are allreduced on the reducer's communication thread as soon as
// backward has finished them (OnGradReady), so communication overlaps compute; each
// peer's contribution is already scaled by 1/global_tokens (trainer.cc), so the sum
// is the token-weighted mean. Finish() waits for the last bucket, then sums the step
// totals (loss, tokens) with an exact small collective. comm_ms is the time Finish
// waited. Parameter hashes are compared with an allgather every `check_every` steps;
// a mismatch is an error naming the step and the peers on each side.
//
// Communication planning (options.comm), only with a TCP ring (the
// constructor taking net::TcpRing): inside BeginStep, at step boundaries only,
//   - probe + re-order: at the first step and every comm.probe_every steps (and at the
//     first step after ReplaceRing), every peer probes all links of the ring's members
//     (collective::ProbeAndReorder) and the ring may be re-formed in the computed
//     order: rank() can change inside BeginStep (callers read it after BeginStep);
//   - auto codec (comm.auto_codec): codec speeds are calibrated once per run (this
//     peer's figures are carried over views, see CarriedCommState) and agreed on each
//     ring (the slowest peer's figures), then every step the planner picks a codec per
//     bucket (collective::PlanCodecs at the first plan, then collective::Replan with
//     hysteresis) from the ring's bottleneck bandwidth and largest RTT, the agreed
//     speeds and a budget: the backward window of the previous step (mean over peers
//     of the time from this peer's first OnGradReady to OnGradReady(0), i.e. the
//     backward pass during which buckets can be sent), or, when comm.comm_budget > 0,
//     comm_budget x the previous step's compute time (mean over peers of the step's
//     wall time minus the time Finish waited). Measurements travel in Finish's exact
//     sum, so every peer plans from identical inputs and gets the identical plan;
//     plans are logged (DescribePlan) whenever they change, the ring order and each
//     link's speed after every probe. The first step of a ring plans from the previous
//     view's measurements (the mean over the peers that had one; compute time scaled
//     by old / new peers); the first step of the run, which has none, plans the least
//     lossy codec (none): never the sparsest top-k for lack of a measurement.
//   - auto's warm-up (buckets.topk_warmup_steps = W, as fixed top-k): steps [0, W) may
//     use none or bf16 only (AdamW measures its second moment on exact sums), steps
//     [W, 2W) run the planned top-k densities through the same geometric ramp as fixed
//     top-k (codec_spec.h TopKDensityAt), and from step W on every bucket is
//     preconditioned (buckets.precondition_from = W, whatever its codec): the
//     residuals of all codecs are in the same units, so a re-plan that changes a
//     bucket's codec loses nothing, and AdamW's v keeps learning on the buckets that
//     went dense or bf16 (DenseSumRanges), and on top-k's refresh steps
//     (--topk-refresh), from every top-k bucket (RefreshedRanges).
// Error feedback residuals live in the bucket exchanges, which survive re-plans,
// re-formed rings and, through CarriedCommState, the reducers of later views (each
// peer keeps its own residual; a codec change folds it in). A step that began but was
// not completed (StepCompleted) is rolled back at the next BeginStep.
//
// Threads: all methods run on the training thread; the transport is used by the
// bucketed reducer's thread only between BeginStep and Finish, and by small
// collectives (on the training thread) outside that window.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/abort_signal.h"
#include "collective/bucketed_reducer.h"
#include "collective/codec_calibration.h"
#include "collective/codec_planner.h"
#include "collective/ring_adapter.h"
#include "net/ring_transport.h"
#include "net/tcp_node.h"
#include "net/tcp_ring.h"
#include "train/gradient_reducer.h"

namespace rt::train {

inline collective::CalibrationOptions CalibrationAtBucketSize() {
  collective::CalibrationOptions o;
  o.floats = 0;
  return o;
}

// Link probing, ring order and automatic codec choice (`--compress auto`,
// `--probe-every`, `--comm-budget`; see the file comment). Equal on every peer.
struct CommOptions {
  bool auto_codec = false;  // plan a codec per bucket (buckets.codec is then ignored)
  // > 0: probe links (and re-order the ring) at the first step and every N steps.
  // 0: probe once, at the first step, when auto_codec or the ring has >= 3 peers
  // (with 2 peers the order cannot matter), never afterwards. < 0: never probe (the
  // ring keeps its order; auto_codec then fails at the first step).
  int probe_every = 0;
  // auto: communication may take this fraction of the step's compute time; 0 = it
  // must hide behind the backward pass.
  double comm_budget = 0;
  // Mixed into every probe and re-form channel (ELASTIC: cluster::RingChannel(view)),
  // so rings of different cluster views never share a link.
  uint64_t channel_salt = 0;
  int zstd_level = 1;   // auto: zstd level the planner may use where it pays (0 = never)
  bool reorder = true;  // false: probe (for the planner) but keep the ring's order
  // > 0: the planner takes this as the ring's bottleneck (bytes/s) instead of the
  // probed one; the same on every peer. For tests whose choice must not depend on
  // how fast loopback happens to be under load.
  double planning_bandwidth_bps = 0;
  collective::ReorderOptions probe;  // probe timing, re-form wait, hysteresis
  // zstd_level is set from zstd_level above; floats 0 (the default here) = the largest
  // bucket's, capped at collective::kMaxCalibrationFloats (speeds depend on the size).
  collective::CalibrationOptions calibration = CalibrationAtBucketSize();
  collective::PlannerOptions planner;  // density ladder, hysteresis
};

// What one peer's gradient exchange keeps for the whole run, across the rings of
// successive cluster views (each view has a RingGradientReducer of its own): the
// bucketed reducer with every bucket's error-feedback residual (and what undoes a
// step that was not applied), this peer's codec calibration, and the planner's last
// measurements. The reducers of one peer share it (RingReducerOptions::carried) and
// use it one at a time, on the training thread. Without it, a reducer keeps these
// for its own lifetime only.
struct CarriedCommState {
  std::unique_ptr<collective::BucketedReducer> buckets;  // null before the first step
  // Whether `buckets` (and its residuals) belong to round sync's outer exchange
  // (RingGradientReducer::UseRoundSync) rather than to per-step gradients.
  bool round_sync = false;
  std::optional<collective::CodecSpeeds> my_speeds;  // this peer's calibration
  // The last finished step's measurements (means over that ring's peers; < 0 =
  // none yet) and that ring's size.
  double backward_s = -1, compute_s = -1;
  int peers = 0;
  int64_t param_allgathers = 0;  // AllgatherOwned calls on a ring (the test fault counts them)
  // The matrix of the last link probe this peer took part in. The first probe of a
  // later view's ring measures only the links between peers that do not hold the same
  // matrix (collective/link_probe.h "Reuse"): after a peer leaves, nothing; after one
  // joins, its own links. Probes every --probe-every steps measure every link again.
  std::optional<collective::LinkMatrix> links;
};

// A test fault (RingReducerOptions::test_stop_in_allgather; RINGTRAIN_TEST_STOP_IN_ALLGATHER
// in cli/train.cc): the `at`-th parameter allgather of this process (1-based, counted
// across the rings of its views; 0 = never) stops the process with SIGSTOP, as a peer
// that freezes there, so fault tests reach the two ways a sharded step can break:
//   - at the start (after_own_segment false): nobody completes the step;
//   - after sending its own segment of the last bucket: its successor lacks the
//     segments this peer would have forwarded; on a ring of 3 its predecessor (which
//     needs only that segment, forwarded by the successor) holds the whole update, so
//     survivors disagree on whether the step happened (with more peers, nobody has it).
struct AllgatherStop {
  int64_t at = 0;
  bool after_own_segment = false;
};

struct RingReducerOptions {
  collective::BucketedReducerOptions buckets;   // bucket size, codec, dense ranges, timeouts
  int check_every = 10;                         // compare param hashes every N steps (0 = never)
  absl::Duration timeout = absl::Seconds(120);  // small collectives: per receive
  CommOptions comm;                             // probing / ring order / auto codec
  // Shared by the reducers of all views of this peer (see CarriedCommState); null =
  // this reducer's own.
  std::shared_ptr<CarriedCommState> carried;
  // ZeRO stage 1 (--zero 1): every bucket is reduce-scattered instead of allreduced
  // (buckets.allreduce.phases), this peer updates the piece of each bucket it holds
  // the sum of (collective::OwnedRange at its ring position) and AllgatherOwned sends
  // the updated parameters around. Dense and bf16 codecs only (BeginStep refuses top-k
  // and auto: their sums are not reduce-scattered). The ring keeps its order
  // (comm.reorder is turned off): a re-order would move every piece's owner. Each
  // peer also keeps its predecessor's pieces' moments (ReplicaRanges).
  bool shard_optimizer = false;
  AllgatherStop test_stop_in_allgather;  // tests only (see AllgatherStop)
};

class RingGradientReducer final : public GradientReducer {
 public:
  // `ring` is owned (e.g. a net::TcpRing from JoinRing). `bytes_sent` (optional)
  // reports the transport's payload bytes sent so far; without it the reducer counts
  // the gradient bytes of its buckets only.
  // No probing, re-ordering or auto codec over a generic transport (in-process tests):
  // options.comm.auto_codec must be false and probing never happens.
  RingGradientReducer(std::unique_ptr<net::RingTransport> ring, RingReducerOptions options,
                      std::function<uint64_t()> bytes_sent = {});
  // A TCP ring: probing, re-ordering and auto codec as options.comm says; bytes_sent()
  // counts the payload bytes of every ring this reducer used, plus probe streams.
  RingGradientReducer(std::unique_ptr<net::TcpRing> ring, RingReducerOptions options);
  ~RingGradientReducer() override;

  // Between steps (after Finish, before the next BeginStep): continue on `ring` (a
  // new cluster view: other members and/or order) whose re-form channels are salted
  // with `channel_salt`. Residuals are kept; the next BeginStep probes again when
  // probing is on (the links changed) and re-plans.
  absl::Status ReplaceRing(std::unique_ptr<net::TcpRing> ring, uint64_t channel_salt);

  // Any thread, idempotent: fails the connections of the ring in use and of a probe
  // in progress with `why`, so BeginStep / Finish / CheckParamHash / SyncState return
  // an error promptly (a ring re-form in progress ends within its form wait, at most
  // comm.probe.form_wait). Afterwards the reducer is only destroyed.
  void Abort(const absl::Status& why) override;

  // The ring order in hosts-file ranks (TCP ring; empty otherwise) and the current
  // codec plan (null before the first auto plan).
  std::vector<int> ring_order() const;
  const collective::CodecPlan* plan() const { return plan_ ? &*plan_ : nullptr; }
  // The bucketed reducer (codecs, residuals; null before the first step).
  const collective::BucketedReducer* bucketed() const { return buckets(); }

  int rank() const override { return ring_->rank(); }
  int peers() const override { return ring_->size(); }
  // A TCP ring: its order (node ranks); otherwise the positions.
  std::vector<int> member_ids() const override;

  absl::Status BeginStep(int64_t step, absl::Span<float> grads) override;
  void OnGradReady(size_t offset) override;
  absl::Status Finish(StepTotals* totals) override;
  absl::Status CheckParamHash(int64_t step, uint64_t param_hash) override;
  absl::Status SyncState(int64_t* step, const std::vector<absl::Span<float>>& state) override;
  uint64_t bytes_sent() const override;
  int64_t PreconditionFrom() const override { return options_.buckets.precondition_from; }
  void SetPreconditioner(std::function<void(absl::Span<float>, size_t)> fn) override;
  std::vector<std::pair<size_t, size_t>> DenseSumRanges() const override;
  std::vector<std::pair<size_t, size_t>> RefreshedRanges() const override;
  std::vector<observe::LinkFigure> ProbedLinks() const override { return probed_links_; }
  void StepCompleted(int64_t step) override;
  void CommitExchange() override;
  // ring_gradient_reducer_round.cc: the settings of the outer exchange replace the
  // per-step ones (codec, top-k warm-up and refresh, preconditioning, auto codec,
  // check_every), which come back with nullopt; the carried buckets are dropped when
  // they belong to the other mode (CarriedCommState::round_sync), so the next
  // BeginStep builds them afresh.
  // With `shard`, also reduce-scatter phases, forwarding of the owned sums to the
  // replica holder and no re-ordering of the ring, as with shard_optimizer.
  absl::Status UseRoundSync(std::optional<collective::CodecSpec> outer_codec, bool shard) override;
  bool ShardsOptimizer() const override { return options_.shard_optimizer; }
  // Per bucket, the piece this peer's ring position owns (train/zero_pieces.h).
  std::vector<std::pair<size_t, size_t>> OwnedRanges(size_t length) const override;
  // The predecessor's pieces (none alone). Finish receives their summed gradient from
  // the predecessor, which sends its own pieces' sums on (+1/N of the gradient bytes).
  std::vector<std::pair<size_t, size_t>> ReplicaRanges(size_t length) const override;
  // Alone: optim::SumOfSquares of the whole buffer. Both modes on a ring: each bucket cut as the
  // ring cuts it (collective::OwnedRange of every position), each piece summed by
  // optim::SumOfSquares, the pieces added in buffer order. Sharded: this peer's pieces, then an
  // allgather of every peer's piece sums.
  absl::StatusOr<double> GradSumOfSquares(absl::Span<const float> grads) override;
  absl::Status AllgatherOwned(absl::Span<float> params) override;
  absl::StatusOr<std::vector<int64_t>> AllgatherInt64(int64_t mine) override;
  absl::StatusOr<std::vector<std::vector<int64_t>>> AllgatherInt64s(
      absl::Span<const int64_t> mine) override;
  // collective::ExchangePieces on this ring (between steps only).
  absl::StatusOr<collective::PieceExchangeResult> ExchangePieces(
      size_t length, int buffers, const std::vector<collective::FloatRange>& held,
      const std::vector<collective::FloatRange>& needed, const collective::PieceReader& read,
      const collective::PieceWriter& write) override;

  // Statistics of the last finished step (buckets, bytes, wait).
  const collective::ReduceStepStats& last_stats() const { return last_stats_; }

 private:
  // Sharded: sends the summed gradient of this peer's pieces to the successor and
  // receives the predecessor's into place (one message per piece, in buffer order).
  absl::Status ForwardOwnedSums(absl::Span<float> grads);
  // The buckets of the last finished step whose codec_used passes `pick`, as merged,
  // ascending ranges of the buffer.
  std::vector<std::pair<size_t, size_t>> BucketRangesWhere(
      const std::function<bool(const std::string& codec_used)>& pick) const;
  bool ProbeDue(int64_t step) const;
  absl::Status Probe();
  absl::Status PlanCodecs();
  // The first plan on this ring: the previous view's measurements, agreed.
  absl::Status AgreeCarriedMeasurements();
  void ResetPlanning();  // forget probes, speeds, plans and measurements (new ring)
  collective::BucketedReducer* buckets() const { return carried_->buckets.get(); }
  void UseRing(std::unique_ptr<net::RingTransport> ring, net::TcpRing* tcp);  // + abort watch

  // Abort: the signal, and the watches of the ring in use (training thread only).
  std::unique_ptr<collective::AbortSignal> abort_ = std::make_unique<collective::AbortSignal>();
  std::unique_ptr<collective::AbortWatch> watch_next_, watch_prev_;

  std::unique_ptr<net::RingTransport> ring_;
  net::TcpRing* tcp_ = nullptr;  // ring_ when it is a TCP ring
  RingReducerOptions options_;
  // UseRoundSync: the per-step values of the settings the outer exchange replaced
  // (unset in per-step mode).
  struct PerStepSettings {
    collective::CodecSpec codec;
    int64_t topk_warmup_steps = 0, topk_refresh_every = 0, precondition_from = -1;
    bool auto_codec = false;
    int check_every = 0;
    collective::RingPhases phases = collective::RingPhases::kAllreduce;
    bool reorder = true;
  };
  // ZeRO-1's pieces are in force: --zero 1, or round sync's sharded outer exchange.
  bool sharded() const { return options_.shard_optimizer || shard_outer_; }
  bool shard_outer_ = false;  // UseRoundSync(codec, shard = true) in force
  std::optional<PerStepSettings> per_step_;
  std::function<uint64_t()> transport_bytes_;
  uint64_t retired_bytes_ = 0;  // TCP: bytes of rings replaced, and of probe streams
  // Probing and planning state (identical on every peer: same inputs, same order).
  bool probed_ = false;       // since the start or the last ReplaceRing
  uint64_t probe_index_ = 0;  // probes on this ring's salt so far (channels derive from it)
  int64_t last_probe_step_ = 0;
  collective::RingLinkSummary links_;
  std::vector<observe::LinkFigure> probed_links_;  // this peer's row of the last probe
  std::optional<collective::CodecSpeeds> speeds_;  // agreed over the ring
  std::optional<collective::CodecPlan> plan_;
  bool plan_allows_topk_ = true;  // the planner options plan_ was made with
  // Timings (NowNs) of the running step on this peer; -1 = not yet.
  int64_t begin_ns_ = -1, first_ready_ns_ = -1, ready0_ns_ = -1, finish_return_ns_ = -1;
  double update_s_ = 0;  // previous step on this peer: Finish return -> next BeginStep
  // Means over peers of the previous step (Finish's exact sum); -1 = no measurement.
  double measured_backward_s_ = -1;
  double measured_compute_s_ = -1;
  // Residuals, calibration, measurements: this peer's for the whole run (shared with
  // the reducers of other views), never null.
  std::shared_ptr<CarriedCommState> carried_;
  bool buckets_on_ring_ = false;  // carried_->buckets runs on ring_ (SetRing done)
  int64_t step_ = 0;
  absl::Span<float> step_grads_;  // BeginStep's buffer (sharded: Finish forwards from it)
  bool in_step_ = false;
  uint64_t counted_bytes_ = 0;
  collective::ReduceStepStats last_stats_;
};

// Copies the leader's (ring rank 0) `data` to every peer over the ring: rank 0 sends
// chunks of `chunk_bytes` to its successor, every other peer receives and forwards
// until the chunk reached the last peer. `data` has the same length on every peer.
absl::Status RingBroadcastFromRank0(net::RingTransport* ring, absl::Span<uint8_t> data,
                                    absl::Duration timeout, size_t chunk_bytes = size_t{4} << 20);

}  // namespace rt::train
