// SyncChoice: `plan` without --outer-every compares, for the given link, per-step
// gradient sync against round sync and suggests the fastest among what learns well.
//
// Every figure comes from PlanRun (run_plan.h) with the inputs varied, so the
// comparison predicts what `plan --compress C` or `plan --outer-every H
// --outer-compress C` would print, memory included. The rows:
//   - per step, each codec of PlanRun's ladder: tokens of a step over its predicted
//     time (compute of the slowest balanced share, plus the codec's exchange not hidden
//     behind the last backward, plus what runs after the update with --zero 1);
//   - top-k counts its dense warm-up (`--topk-warmup`, a tenth of the run by default:
//     those steps send bf16; the density ramp after them is not counted);
//   - the gradient accumulation that would hide the exchange of none and bf16: the
//     smallest power of two `--accum` whose rate reaches 95% of compute only, at most
//     4096 (only when the plain codec does not reach it);
//   - round sync, each outer codec: the smallest H of 10, 30, 100, 300, 500, 1000
//     whose rate reaches 95% of compute only, else the largest (top-k: H <= 100);
//     with overlap (train's default) where its two more parameter copies fit in
//     memory, else with `--outer-overlap off` in the row's flags.
// What "learns well" means here (docs/round-sync.md says where each comes from):
//   per step none and bf16: yes; top-k: densities >= 1% (measured +2.4% loss against
//   dense after 3,000 steps with the warm-up); accumulation: a global batch of at most
//   0.5M tokens below 1B parameters, 1M below 6B, 2M above (GPT-3's batch sizes);
//   round sync: H <= 1000 with none, bf16, int8, int4 (DiLoCo, INTELLECT-1, Streaming
//   DiLoCo), top-k 3% pseudo-gradients with H <= 100 (SparseLoCo).
// The suggestion: among the rows that learn well and fit in memory, the fastest; but
// the first per-step row (least lossy first) within 5% of it is preferred: per-step
// sync learns best per token.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "train/run_plan.h"

namespace rt::train {

struct SyncOption {
  std::string kind;   // "per-step", "accumulate" or "round"
  std::string flags;  // what `train` takes, e.g. "--outer-every 1000 --outer-compress none"
  std::string note;   // e.g. "warm-up: 10% dense, 10% ramp", "4.19M tokens per step"
  double tokens_per_s = 0;
  double of_compute = 0;  // tokens_per_s / compute-only tokens/s
  double memory_bytes = 0;
  bool fits = false;
  bool learns_well = false;
  std::string learning;  // why (not) learns well, one phrase
};

struct SyncComparison {
  double compute_only_tokens_per_s = 0;  // tokens of a step over its compute alone
  std::vector<SyncOption> options;
  int suggested = -1;  // index into options; -1 if nothing learns well and fits
};

// Needs `in.gflops` (times) and in.peers >= 2; in.outer_every is ignored (every row
// sets its own). Errors: PlanRun's for the inputs as given.
absl::StatusOr<SyncComparison> CompareSync(const RunPlanInputs& in);

}  // namespace rt::train
