// RunPlan: will a model fit on N peers of a given size, and where will a step's time go?
//
// `ringtrain plan` prints this before anyone rents machines. Memory per peer is exact
// for what ringtrain allocates (flat fp32 params, grads, two AdamW moments, the bf16
// weight copy, the activation plan of model::Gpt, the compression residual) plus a
// stated allowance for the process and OS. Times are predictions from the figures the
// user gives (achieved GFLOP/s of each peer, link bandwidth and RTT): the same arithmetic
// that `--compress auto` uses, shown so a user can check it. Peers of unequal speed are
// planned as `train --balance` runs them: slot shares from SlotBalancer::BestShares.
//
// --zero 0|1 (optimizer sharding, as `train --zero 1` runs it). With
// zero = 1 on a ring of N >= 2 peers, per peer and P parameters:
//   params 4P and grads 4P (full; grads also stage the updated parameters of the step),
//   AdamW moments (m, v fp32) of this peer's pieces        8P/N
//   replica of the predecessor's pieces' moments           8P/N
//   commit staging (own + replica gradient pieces, kept
//     until the parameter allgather completes)             4 x 2P/N
// so 24P/N where zero 0 holds 8P of moments; bf16 weights, activations and reserve
// unchanged; the residual as the codec's (none: 0, bf16: 4P). The pieces are every
// gradient bucket's N segments (train/zero_pieces.h), whose lengths differ by at most
// one float, so P/N is exact up to one float per bucket (a few KB). Top-k and auto
// are refused: the reduce-scatter cannot carry their sparse sums. A checkpoint adds
// no memory: its writers put the moments' pieces into its files as they arrive
// (ckpt::CheckpointBuilder), the kernel's page cache holding them. With N = 1
// --zero 1 is --zero 0 (nothing to shard).
// Communication per peer per step, zero 1 (N >= 2): reduce-scatter (N-1)/N x 4P (2P on
// the bf16 wire), during backward; then, after the optimizer step, the allgather of
// the updated parameters, always fp32, (N-1)/N x 4P, and the replica forward (each
// owner sends its pieces' summed gradient, fp32, to its successor) 4P/N; one RTT per
// ring hop, N-1 during backward and N after. Zero 0: the allreduce, 2(N-1)/N x 4P
// (2P bf16), or top-k's allgather, all during backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/gpt.h"

namespace rt::train {

struct RunPlanInputs {
  model::GptConfig config;
  model::GptOptions options;  // precision, recompute, max_batch = --batch
  int accum = 1;
  int peers = 1;
  double ram_bytes = 32e9;       // per peer
  double reserve_bytes = 1.5e9;  // OS, page cache for shards, process overhead
  // Achieved GFLOP/s (bench compute): empty = no time estimate; one value = every peer;
  // else one per peer (ring order).
  std::vector<double> gflops;
  double max_skew = 8;            // train --max-skew: slower than this x the fastest -> 0 slots
  double link_bps = 1e9 / 8;      // bottleneck ring link, bytes/s
  double rtt_s = 0.5e-3;          // per ring hop
  std::string compress = "none";  // none | bf16 | topk:D | auto (the residual memory)
  // Gradient buckets (train --bucket-mb): the bucket backward finishes last can only be
  // exchanged after it, so at least its share of the exchange never hides.
  size_t bucket_bytes = size_t{25} << 20;
  int zero = 0;  // --zero: 0, or 1 (optimizer sharding; see above)
  // Round sync (--outer-every H > 0, --outer-compress; sync/round_sync.h): see RoundEstimate.
  int outer_every = 0;
  std::string outer_compress = "none";
  bool outer_overlap = false;  // --outer-overlap on: the exchange beside the next round
  bool outer_shard = false;    // --outer-shard on (codec none, overlap off): see RoundEstimate
};

// Round sync, per peer: H inner steps of compute on the balanced shares (train's
// --balance on, the default, sizes inner steps by speed: train/round_balancer.h), then
// one exchange of the whole buffer with the outer codec: dense ring
// 2(N-1)/N x n x (4 fp32 | 2 bf16 | 1.0625 int8 | 0.5625 int4) bytes, or top-k's
// allgather (as per step); 2(N-1) RTTs. Without overlap the exchange runs between two
// rounds and nothing hides; with it (--outer-overlap on) round r's exchange runs beside
// round r+1's compute, so up to a round's compute of it hides:
//   hidden_s = overlap ? min(exchange_s, H x compute_s) : 0,
//   round_s = H x compute_s + exchange_s - hidden_s,  tokens/s = H x tokens_per_step / round_s
// (the exchange's own CPU work beside the compute is not counted: 4 netns peers at
// 100 Mbit/s sharing 2 cores spent 88-93% of their time computing with overlap). Memory adds the
// round-start copy and the outer momentum (fp32, 4n each), with overlap also the
// anchor and the exchange buffer (4n each), and, for a lossy codec, its error-feedback residual
// (4n) instead of the per-step one. With --outer-shard on (codec none, overlap off; N >= 2)
// both are held on the ZeRO-1 pieces (train/zero_pieces.h), own and the predecessor's:
// 2 x 4 x 2n/N, plus the new momentum of those pieces staged during an outer step (4 x 2n/N,
// so that a broken allgather changes nothing): 24n/N at the outer step's peak; the wire
// adds the owned sums sent to the replica holder, 4n/N (sync/round_sync.h).
struct RoundEstimate {
  int every = 0;                         // H (0: per-step sync, the rest is 0)
  std::string codec;                     // --outer-compress
  double wire_bytes = 0;                 // sent per peer per round
  double exchange_s = 0;                 // the exchange's time per round
  double hidden_s = 0;                   // of which hidden behind the next round (overlap)
  double compute_s = 0;                  // H inner steps of the slowest balanced share
  double round_s = 0;                    // compute_s + exchange_s - hidden_s
  double tokens_per_s = 0;               // H x tokens_per_step / round_s
  double compute_only_tokens_per_s = 0;  // tokens_per_step / one step's compute
  bool overlap = false;                  // --outer-overlap on
  double outer_state_bytes = 0;          // round-start copy + momentum (+ anchor, exchange;
                                         // sharded: pieces + staging, the outer step's peak)
  bool sharded = false;                  // --outer-shard on with N >= 2
};

struct CodecEstimate {
  std::string codec;      // "none", "bf16", "topk:0.01", ...
  double wire_bytes = 0;  // sent per peer per step, every phase
  double seconds = 0;     // predicted communication time per step, every phase
  // The part that runs during backward and can hide behind it: everything with zero 0,
  // the reduce-scatter with zero 1. The rest (zero 1: parameter allgather and replica
  // forward, after the optimizer step) always adds to the step.
  double backward_bytes = 0, backward_seconds = 0;
  bool hides = false;  // backward_seconds fits behind backward compute (needs gflops)
};

struct RunPlan {
  // Memory per peer, bytes. `adam` is the moments this peer updates (all of them with
  // zero 0); adam_replica and commit_staging are 0 unless sharded.
  bool sharded = false;  // zero 1 on N >= 2 peers
  double params = 0, grads = 0, adam = 0, adam_replica = 0, commit_staging = 0;
  double bf16_weights = 0, activations = 0, residual = 0, reserve = 0;
  double total = 0;             // every peer, the checkpoint writers included
  bool fits = false;            // total <= RAM
  int max_batch_that_fits = 0;  // with the same options; 0 if even batch 1 does not fit
  // Model figures.
  size_t n_params = 0, flop_params = 0;
  double flops_per_token = 0;   // 6N + 12 L T D
  int64_t tokens_per_step = 0;  // batch * accum * seq_len * peers
  // Time per step (0 without gflops), as load balancing splits the step: compute of the
  // peer that finishes last, and the backward of its last micro-step (the part of the
  // step that communication can hide behind).
  double compute_s = 0, backward_s = 0;
  // Per peer (ring order; empty without gflops): GFLOP/s and the slots of a step
  // (global batch = batch * accum * peers) split equally and by speed (--balance on).
  std::vector<double> peer_gflops;
  std::vector<int> equal_shares, balanced_shares;
  // Predicted step: compute of the slowest share plus the suggested codec's backward
  // part not hidden behind that peer's last backward, plus its part after the update
  // (zero 1); tokens/s = tokens_per_step / step_s.
  double equal_step_s = 0, balanced_step_s = 0;
  double equal_tokens_per_s = 0, balanced_tokens_per_s = 0;
  std::vector<CodecEstimate> codecs;  // none, bf16, topk ladder (zero 1: none, bf16)
  std::string recommended_codec;      // least lossy codec that hides behind backward
  RoundEstimate round;                // with outer_every > 0 (times need gflops)
};

// Errors name the flag: --peers, --accum, --ram-gb, --link-mbps, --gflops, --compress
// (unknown; top-k or auto with --zero 1), --zero (not 0 or 1), --outer-every /
// --outer-compress (negative, unknown, with --zero 1 or a per-step --compress), and the
// model's shape.
absl::StatusOr<RunPlan> PlanRun(const RunPlanInputs& in);

// The rate `plan --train-tokens` prices a run at (tokens/s; 0 without gflops): round
// sync's (H inner steps and the exchange not hidden, per round) with --outer-every,
// else the balanced per-step rate (compute and the suggested codec's exchange).
double RunTokensPerSecond(const RunPlan& p);

// `plan --gflops`: "120" (every peer) or "120,120,80,60" (one per peer, as many as
// `peers`); "" or "0" = no time estimate (empty result). Errors: not a positive
// number, or a list whose length is not `peers`.
absl::StatusOr<std::vector<double>> ParsePeerGflops(absl::string_view text, int peers);

}  // namespace rt::train
