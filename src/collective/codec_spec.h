// Which gradient codec a bucket uses: parsing `--compress`, and the top-k density
// warm-up schedule. A choice is per bucket, so `auto` can pick one per bucket.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::collective {

// kInt8/kInt4: block-scaled integers on a ring allreduce (quantized_allreduce.h), with
// error feedback; made for round sync's pseudo-gradients (--outer-compress), accepted
// per step too. `auto` never picks them.
enum class CodecKind { kNone, kBf16, kTopK, kInt8, kInt4 };

struct CodecSpec {
  CodecKind kind = CodecKind::kNone;
  double density = 1.0;          // top-k only: fraction of entries sent, in (0, 1]
  int zstd_level = 0;            // top-k only: zstd level for encoded messages (0 = off)
  std::string ToString() const;  // "none", "bf16", "topk:0.01", "topk:0.01+zstd3"
  bool operator==(const CodecSpec& o) const {
    return kind == o.kind && density == o.density && zstd_level == o.zstd_level;
  }
};

// "none" | "bf16" | "int8" | "int4" | "topk:DENSITY" (0 < DENSITY <= 1). "auto" is the caller's job
// (it picks a spec per bucket) and is refused here with a message saying so.
// zstd_level must be in [0, 19].
absl::StatusOr<CodecSpec> ParseCodecSpec(absl::string_view text, int zstd_level = 0);

// Top-k density at 0-based `step` with a warm-up of W = `warmup_steps`:
//   steps [0, W): 1, i.e. dense (AdamW measures the second moment that preconditioned
//     top-k then freezes: optim/adamw.h "Preconditioned steps");
//   steps [W, 2W): geometric from density^(1/(W+1)) down, each step lowering the
//     density by the same factor (as DGC's warm-up), so the residuals build up gradually;
//   from step 2W on (and always when W = 0): `density`.
// Measured (3 peers, 300 steps, W = 50, exploratory builds): with the ramp top-k ended
// 3.4% above dense at step 300, switching from dense straight to the target 4.0%.
double TopKDensityAt(int64_t step, double density, int64_t warmup_steps);

// Whether 0-based `step` is a refresh step of preconditioned top-k with warm-up W =
// `warmup_steps` and a refresh every K = `refresh_every` steps (--topk-refresh): once
// the density ramp is over (step >= 2W), every K-th step, i.e. steps 2W + K - 1,
// 2W + 2K - 1, ... On such a step each top-k bucket sends this step's gradient dense
// and leaves the residual untouched (BucketExchange), so the summed gradient is
// exact and AdamW's frozen second moment learns from it (optim/adamw.h, "refreshed").
// Never when W <= 0 (no preconditioning) or K <= 0.
bool IsTopKRefreshStep(int64_t step, int64_t warmup_steps, int64_t refresh_every);

}  // namespace rt::collective
