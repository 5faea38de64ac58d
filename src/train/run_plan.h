// RunPlan: will a model fit on N peers of a given size, and where will a step's time go?
//
// `ringtrain plan` prints this before anyone rents machines. Memory per peer is exact
// for what ringtrain allocates (flat fp32 params, grads, two AdamW moments, the bf16
// weight copy, the activation plan of model::Gpt, the compression residual) plus a
// stated allowance for the process and OS. Times are predictions from the figures the
// user gives (achieved GFLOP/s of each peer, link bandwidth and RTT): the same arithmetic
// that `--compress auto` uses, shown so a user can check it. Peers of unequal speed are
// planned as `train --balance` runs them: slot shares from SlotBalancer::BestShares.
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
  std::string compress = "none";  // none | bf16 | topk:D (for the residual memory)
};

struct CodecEstimate {
  std::string codec;      // "none", "bf16", "topk:0.01", ...
  double wire_bytes = 0;  // sent per peer per step
  double seconds = 0;     // predicted communication time per step
  bool hides = false;     // fits behind backward compute (needs gflops)
};

struct RunPlan {
  // Memory per peer, bytes.
  double params = 0, grads = 0, adam = 0, bf16_weights = 0, activations = 0, residual = 0;
  double reserve = 0, total = 0;
  bool fits = false;
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
  // Predicted step: compute of the slowest share plus the suggested codec's time not
  // hidden behind that peer's last backward; tokens/s = tokens_per_step / step_s.
  double equal_step_s = 0, balanced_step_s = 0;
  double equal_tokens_per_s = 0, balanced_tokens_per_s = 0;
  std::vector<CodecEstimate> codecs;  // none, bf16, topk ladder
  std::string recommended_codec;      // least lossy codec that hides behind backward
};

absl::StatusOr<RunPlan> PlanRun(const RunPlanInputs& in);

// `plan --gflops`: "120" (every peer) or "120,120,80,60" (one per peer, as many as
// `peers`); "" or "0" = no time estimate (empty result). Errors: not a positive
// number, or a list whose length is not `peers`.
absl::StatusOr<std::vector<double>> ParsePeerGflops(absl::string_view text, int peers);

}  // namespace rt::train
