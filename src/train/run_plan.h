// RunPlan: will a model fit on N peers of a given size, and where will a step's time go?
//
// `ringtrain plan` prints this before anyone rents machines. Memory per peer is exact
// for what ringtrain allocates (flat fp32 params, grads, two AdamW moments, the bf16
// weight copy, the activation plan of model::Gpt, the compression residual) plus a
// stated allowance for the process and OS. Times are predictions from the figures the
// user gives (achieved GFLOP/s per peer, link bandwidth and RTT): the same arithmetic
// that `--compress auto` uses, shown so a user can check it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gpt.h"

namespace rt::train {

struct RunPlanInputs {
  model::GptConfig config;
  model::GptOptions options;  // precision, recompute, max_batch = --batch
  int accum = 1;
  int peers = 1;
  double ram_bytes = 32e9;        // per peer
  double reserve_bytes = 1.5e9;   // OS, page cache for shards, process overhead
  double gflops = 0;              // achieved per peer (bench compute); 0 = no time estimate
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
  // Time per step (0 when gflops == 0).
  double compute_s = 0, backward_s = 0;
  std::vector<CodecEstimate> codecs;  // none, bf16, topk ladder
  std::string recommended_codec;      // least lossy codec that hides behind backward
};

absl::StatusOr<RunPlan> PlanRun(const RunPlanInputs& in);

}  // namespace rt::train
