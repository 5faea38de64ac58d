// RoundSync: round synchronisation of data-parallel training (the DiLoCo family), the
// strategy beside per-step gradient sync (train/gradient_reducer.h).
//
// Each peer takes H = `every` inner optimizer steps on its own slots with its own AdamW
// state and no communication; replicas differ between rounds by design. At the end of
// a round the ring averages the peers' pseudo-gradients (round-start parameters minus
// the current ones), weighted by the tokens each peer trained on in the round, and an
// outer SGD with Nesterov momentum updates the shared round-start copy:
//   delta = sum_p w_p (start - local_p)          w_p = tokens_p / tokens of the round
//   buf   = mu * buf + delta
//   new   = start - lr * (delta + mu * buf)      (Nesterov; lr = outer_lr, mu = outer_momentum)
// Every peer then starts the next round from `new`, the same bits on every peer: the
// exchanged sum is identical everywhere (collective/ring_allreduce.h) and the update
// below is a pure function of it, of `start` and of `buf`, which are identical too.
//
// What travels, and why it is written this way. With an exact exchange (codec none)
// every peer sends w_p * local_p and the ring returns the token-weighted average of the
// parameters, avg; delta = start - avg. The update is applied as
//   new = avg + c,   c = (1 - lr) * delta - lr * mu * buf,
// which is the formula above rearranged (start - lr*delta = avg + (1-lr)*delta). With
// lr = 1 and mu = 0, c is 0 and new is avg bit for bit: outer lr 1 without momentum is
// plain parameter averaging, and one peer alone then trains exactly as without round
// sync. Sending pseudo-gradients instead would not give that: start - (start - local)
// differs from local in the last bit wherever start and local are more than a factor 2
// apart (Sterbenz), e.g. parameters that cross zero. With a lossy codec (bf16, top-k)
// what travels is w_p * (start - local_p), small values the codec and its per-peer
// error feedback are made for; then delta is the sum and avg = start - delta.
//
// Overlap (options.overlap, --outer-overlap on): the exchange of round r runs on the
// reducer's communication thread beside the inner steps of round r+1, and its outer
// step is applied one round late (the "one round delayed" outer update):
//   end of round r:   anchor = local; launch the exchange of round r's contribution
//                     (computed from anchor and start = G_r); keep training from local.
//   end of round r+1: wait for it; G_{r+1} = outer step of G_r with its sum (the same
//                     formula as above, written into start and buf only); rebase this
//                     peer's replica onto it: local += G_{r+1} - anchor (this round's own
//                     progress kept, the others' rounds and the outer step added); then
//                     anchor = local and launch round r+1's exchange.
// The shared parameters are G (start()): identical on every peer at every outer step,
// and what param_hash compares there; the local replicas differ at every step by design
// (each carries its own round's progress). A round's exchange that was lost (a view
// change) is redone among the survivors from anchor and start, which stay as they were
// at the launch until the outer step is applied. With one peer, lr 1, momentum 0 and
// codec none, G_{r+1} = anchor bit for bit, the rebase adds nothing, and the replica
// trains exactly as plain training (G trails it by one round).
//
// Sharded outer state (options.shard, --outer-shard on; codec none, overlap off): the
// exchange is an allreduce of w_p * local_p, i.e. a reduce-scatter (each ring position
// ends up with the exact sum of one segment of every bucket, the bits the allreduce
// would give) followed by an allgather of that sum. The outer step above is elementwise,
// so a segment's owner can apply it to its segment alone and the allgather carry the
// new parameters instead of the sum: the same fp32 bytes on the wire, the same bits in
// every replica. Then start and buf are needed only on the segments a peer owns, plus
// (ZeRO-1's rule, train/zero_pieces.h) its ring predecessor's, so that one lost peer
// loses nothing: 2 x 2n/N floats per peer instead of 2n. With sharding start() and
// momentum() hold pieces() only, packed in order; who owns what, the moving of pieces
// when the ring changes and the gathering for checkpoints are the trainer's
// (train/trainer_round_shard.cc). Lossy codecs stay unsharded: their allgather carries
// the compressed sum, and sharding the step would make it carry fp32 (or re-quantised)
// parameters instead, more bytes or other bits.
//
// Units: parameters, start and buf are fp32 flat buffers in ParamLayout order (DESIGN
// invariant 1), all of one length (with sharding: the pieces' floats, packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/codec_spec.h"
#include "core/aligned_buffer.h"

namespace rt::sync {

struct RoundSyncOptions {
  int every = 0;                // H: inner steps per round (--outer-every); 0 = per-step sync
  float outer_lr = 0.7f;        // --outer-lr
  float outer_momentum = 0.9f;  // --outer-momentum (Nesterov)
  collective::CodecSpec codec;  // --outer-compress: how the ring sums the contributions
  bool overlap = false;         // --outer-overlap: exchange beside the next round (above)
  // --outer-after N: the run's steps [0, N) are per-step gradient sync, round sync takes
  // over at step count N as a run resumed there with --outer-every would (momentum from
  // zero, the per-step exchange's residuals dropped; see train/trainer.h). 0 = from the
  // start. Round ends stay multiples of `every` (IsRoundEnd), so the first round after
  // the switch is shorter when N is not one.
  int after = 0;
  // --inner-lr-scale F: the inner steps take F x the run's learning-rate schedule (the
  // per-step steps before --outer-after keep it as it is). Each peer's AdamW step
  // normalises the gradient of its own share of the batch, noisier than the whole
  // batch's, so an inner step carries less of the common direction than a per-step one;
  // a larger inner lr made up part of that on the small model measured
  // (docs/benchmarks/round-sync.md). 1 = unchanged.
  float inner_lr_scale = 1.0f;
  // --outer-shard on: start and buf held by segment owners (see the file comment);
  // codec none and overlap off only (Validate).
  bool shard = false;
  bool enabled() const { return every > 0; }
  // The flags as the user typed them are named in the error.
  absl::Status Validate() const;
  // "every=30 lr=0.7 momentum=0.9 compress=none" (+ " overlap=on" with overlap,
  // + " after=N" with after > 0, + " inner_lr_scale=F" with F != 1, + " shard=on"):
  // what every peer of a ring must agree on.
  std::string ToString() const;
};

// Whether the step count `steps_done` (optimizer steps completed) ends a round: every
// `every` steps, and the run's last step (a shorter last round), so the schedule
// depends only on step counts and resumes the same at any peer count.
bool IsRoundEnd(int64_t steps_done, int64_t total_steps, int every);

// Whether a multiple of `interval` lies in (round_start, steps_done]: an evaluation or a
// checkpoint due during a round happens at its end, where the replicas agree.
bool DueInRound(int64_t round_start, int64_t steps_done, int interval);

// Where float `index` of the flat buffer sits in a packed buffer of `pieces` (sorted,
// disjoint ranges laid end to end), or -1 if no piece holds it.
int64_t PackedOffset(const std::vector<std::pair<size_t, size_t>>& pieces, size_t index);

// Figures of one outer step.
struct OuterStepFigures {
  double pseudo_grad_norm = 0;  // L2 norm of delta (the averaged pseudo-gradient)
};

using FloatRange = std::pair<size_t, size_t>;  // [begin, end) floats of the flat buffer

class RoundSync {
 public:
  RoundSync(RoundSyncOptions options, size_t floats);

  const RoundSyncOptions& options() const { return options_; }
  // The round-start copy and the outer momentum: state the ring serves, replaces and
  // checkpoints (checkpoints hold the momentum; at a round boundary start == params).
  // Sharded: pieces() of them, packed; the ring moves and gathers them (trainer).
  absl::Span<float> start() { return start_.span(); }
  absl::Span<float> momentum() { return momentum_.span(); }
  absl::Span<const float> momentum() const { return momentum_.span(); }
  // Whether the exchange carries parameters (codec none) rather than pseudo-gradients.
  bool exchanges_params() const { return options_.codec.kind == collective::CodecKind::kNone; }

  // ---- Sharded outer state (options().shard; see the file comment) ----
  bool sharded() const { return options_.shard; }
  // start() and momentum() are `start` and `momentum` from now on, which hold `pieces`
  // (sorted, disjoint) packed in order (each as long as the pieces' floats).
  void SetPieces(std::vector<FloatRange> pieces, AlignedBuffer<float> start,
                 AlignedBuffer<float> momentum);
  const std::vector<FloatRange>& pieces() const { return pieces_; }
  // The floats of pieces() (the length of start() and momentum()).
  size_t held_floats() const { return start_.size(); }
  // The sharded outer step, first half: for every piece, from the exchange's sum there
  // (`sum_to_new`, full-length; the reduce-scatter's result on owned pieces, the
  // forwarded one on the replica's) writes the new shared parameters into `sum_to_new`
  // in place and the new momentum into `staged` (held_floats()); start and momentum
  // are untouched, so the step can still be dropped. Returns the sum of squares of
  // delta over `norm_pieces` (this peer's owned ones: each coordinate counted once
  // over the ring).
  double StageOuterStep(absl::Span<float> sum_to_new, absl::Span<float> staged,
                        const std::vector<FloatRange>& norm_pieces) const;
  // StageOuterStep of a round in which no peer of the ring trained (SkipOuterStep): the
  // new parameters are the round-start copy (written into `sum_to_new` on every piece)
  // and `staged` is the momentum unchanged.
  void StageNoOuterStep(absl::Span<float> sum_to_new, absl::Span<float> staged) const;
  // Second half, once every peer's new parameters are in `params`: momentum = staged
  // (swapped: `staged` then holds the old momentum; null: StageOuterStep was given
  // momentum() itself), start = params on the pieces, and the round ends as Apply does.
  void CommitOuterStep(AlignedBuffer<float>* staged, absl::Span<const float> params);

  // A round begins from `params` (after initialisation, a resume, a received state or
  // an outer step): start = params (sharded: on the pieces); this peer's token count and
  // pending mark are reset.
  void BeginRound(absl::Span<const float> params);
  // Round sync begins at `params` (--outer-after's switch): what a run resumed there
  // from a per-step checkpoint holds, i.e. BeginRound with the momentum zero and
  // nothing received or sat out.
  void Restart(absl::Span<const float> params);

  // Inner steps: tokens this peer trained on in the round so far.
  void AddTokens(int64_t tokens) { round_tokens_ += tokens; }
  int64_t round_tokens() const { return round_tokens_; }
  // The inner part of the round's last step (0-based `step`) is applied on this peer;
  // if its exchange fails, the step is redone from the exchange (InnerDone).
  void MarkInnerDone(int64_t step) { inner_done_step_ = step; }
  bool InnerDone(int64_t step) const { return inner_done_step_ == step; }
  // The state was replaced from outside (a peer that was behind, or joined, received the
  // ring's): no inner work of this peer is pending any more and its round holds no tokens
  // of its own; AfterReplacedState says how the round goes on.
  void ForgetRound();
  bool replaced() const { return replaced_; }
  // Called before the next step once the state was replaced, with `at_round_start`
  // whether the received state ends a round (steps done a multiple of H, or 0). There
  // the round begins from the received parameters (the ring's shared ones). Mid-round
  // the received replica is one peer's own: this peer goes back to the round's shared
  // start (the received round-start copy) and sits the rest of the round out (no inner
  // steps, no tokens, weight 0 at the exchange), so it trains from the next round's
  // shared parameters, with the outer state, as every other peer. With overlap and a
  // pending round (received with the anchor and the pending flag), even at a round's
  // start the received replica is the serving peer's own: params and anchor go back to
  // the shared copy (start), the pending round is kept with no tokens of this peer (it
  // joins the redo with weight 0), and mid-round the peer sits out as above. Sharded
  // (no whole start here), a peer sitting out keeps the received replica: its weight is
  // 0 and the outer step's allgather replaces it.
  void AfterReplacedState(bool at_round_start, absl::Span<float> params);
  bool sitting_out() const { return sitting_out_; }
  // This peer's loss of its last inner step (what a redone exchange's step reports).
  void set_inner_loss(double loss) { inner_loss_ = loss; }
  double inner_loss() const { return inner_loss_; }

  // Weight of this peer in the round: mine / total (1 when alone; 0 when total is 0).
  static float Weight(int64_t mine, int64_t total);

  // This peer's contribution to the exchange, into `out` (params.size() floats):
  // weight * params (exact codec) or weight * (start - params) (see the file comment).
  void Contribution(absl::Span<const float> params, float weight, absl::Span<float> out) const;

  // A round in which no peer of the ring trained a token (every member sat it out or had
  // no slots): all weights are 0, so the exchange's sum is 0, and an outer step would
  // take that for the peers' average (codec none: new = (1 - lr) * start - ..., the
  // parameters scaled down whole). There is no progress to apply: params = start, the
  // momentum stays, and the round ends as Apply ends it. Unsharded (sharded:
  // StageNoOuterStep, the trainer gathers start's pieces).
  void SkipOuterStep(absl::Span<float> params);
  // `sum`: the exchange's result (identical on every peer). Applies the outer Nesterov
  // step: params = start = new, momentum updated; ends the round (BeginRound(params)).
  OuterStepFigures Apply(absl::Span<const float> sum, absl::Span<float> params);

  // ---- Overlap (options().overlap; see the file comment) ----
  // Whether a finished round's outer step is still to be applied (its exchange in
  // flight, or lost and to be redone). A state the ring serves carries it (pending()).
  bool has_pending() const { return pending_flag_[0] != 0.0f; }
  // The anchor (this peer's replica when the pending round's exchange was launched) and
  // the one-float pending flag: state the ring serves and replaces with the rest.
  absl::Span<float> anchor() { return anchor_.span(); }
  absl::Span<float> pending_flag() { return absl::MakeSpan(pending_flag_, 1); }
  // This peer's tokens in the pending round (0 after ForgetRound: a replica received
  // from another peer carries that peer's round, which that peer contributes).
  int64_t pending_tokens() const { return pending_tokens_; }
  // The round ends here and its exchange goes beside the next one: anchor = params,
  // pending = true, its tokens move to pending_tokens() and a new round begins
  // (round_tokens() = 0). Nothing is sent yet (the weight needs the others' tokens).
  void Launch(absl::Span<const float> params);
  // The pending round's contribution with `weight`, into exchange() (which the reducer
  // then owns until the exchange finishes): from anchor and start, unchanged since
  // Launch, so a redo among other peers (new weights) computes it again.
  void Recontribute(float weight);
  // The buffer the pending exchange sums in place (params.size() floats).
  absl::Span<float> exchange() { return exchange_.span(); }
  // `sum`: the pending exchange's result. The outer step as Apply, into start and the
  // momentum only; then params += start - anchor (skipped where that is 0). Clears pending.
  OuterStepFigures ApplyDelayed(absl::Span<const float> sum, absl::Span<float> params);
  // A round's end that drains (overlap off from here: a checkpoint, an evaluation, a
  // stop or the run's end): this round's contribution as Contribution(params', weight)
  // would be after ApplyDelayed(pending_sum, params) made params', computed without
  // changing anything, so that both exchanges can finish before either outer step is
  // applied (then ApplyDelayed, then Apply: the same bits).
  void DrainContribution(absl::Span<const float> pending_sum, absl::Span<const float> params,
                         float weight, absl::Span<float> out) const;
  // The pending round is dropped without an outer step (no peer of the exchange had
  // tokens in it: its progress stays in the replicas and enters the next exchange).
  void DropPending();

 private:
  // delta, the momentum and the new shared parameters from the exchange's sum; writes
  // start and buf, and `out` (may be null) with the new parameters.
  OuterStepFigures OuterUpdate(absl::Span<const float> sum, float* out);

  RoundSyncOptions options_;
  AlignedBuffer<float> start_, momentum_;
  AlignedBuffer<float> anchor_, exchange_;  // overlap only (empty otherwise)
  std::vector<FloatRange> pieces_;          // sharded: what start_ and momentum_ hold
  float pending_flag_[1] = {0.0f};
  int64_t round_tokens_ = 0;
  int64_t pending_tokens_ = 0;
  int64_t inner_done_step_ = -1;
  bool replaced_ = false;     // ForgetRound until AfterReplacedState
  bool sitting_out_ = false;  // until the round's end (Apply, or Launch with overlap)
  double inner_loss_ = 0;
};

}  // namespace rt::sync
