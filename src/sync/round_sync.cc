// The outer step of round sync and its schedule (see round_sync.h).
#include "sync/round_sync.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_format.h"

namespace rt::sync {

absl::Status RoundSyncOptions::Validate() const {
  if (every < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--outer-every must be >= 0 inner steps per round (0 = per-step sync), got %d", every));
  }
  if (!(outer_lr > 0) || !std::isfinite(outer_lr) || outer_lr > 10) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--outer-lr must be in (0, 10], got %g", outer_lr));
  }
  if (!(outer_momentum >= 0) || !(outer_momentum < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--outer-momentum must be in [0, 1), got %g", outer_momentum));
  }
  return absl::OkStatus();
}

std::string RoundSyncOptions::ToString() const {
  return absl::StrFormat("every=%d lr=%g momentum=%g compress=%s", every, outer_lr, outer_momentum,
                         codec.ToString());
}

bool IsRoundEnd(int64_t steps_done, int64_t total_steps, int every) {
  if (every <= 0) return true;
  return steps_done % every == 0 || steps_done == total_steps;
}

bool DueInRound(int64_t round_start, int64_t steps_done, int interval) {
  if (interval <= 0 || steps_done <= round_start) return false;
  // The largest multiple of interval <= steps_done, and whether it is past round_start.
  return (steps_done / interval) * interval > round_start;
}

RoundSync::RoundSync(RoundSyncOptions options, size_t floats) : options_(options) {
  start_.Resize(floats);
  momentum_.Resize(floats);
  momentum_.Zero();
}

void RoundSync::BeginRound(absl::Span<const float> params) {
  std::copy(params.begin(), params.end(), start_.data());
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;
}

void RoundSync::ForgetRound() {
  round_tokens_ = 0;
  inner_done_step_ = -1;
  replaced_ = true;
}

void RoundSync::AfterReplacedState(bool at_round_start, absl::Span<float> params) {
  replaced_ = false;
  if (at_round_start) {
    BeginRound(params);
    sitting_out_ = false;
    return;
  }
  std::copy(start_.data(), start_.data() + params.size(), params.begin());
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = true;
}

float RoundSync::Weight(int64_t mine, int64_t total) {
  if (total <= 0) return 0.0f;
  return static_cast<float>(static_cast<double>(mine) / static_cast<double>(total));
}

void RoundSync::Contribution(absl::Span<const float> params, float weight,
                             absl::Span<float> out) const {
  const size_t n = params.size();
  const float* s = start_.data();
  if (exchanges_params()) {
    for (size_t i = 0; i < n; ++i) out[i] = weight * params[i];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = weight * (s[i] - params[i]);
  }
}

OuterStepFigures RoundSync::Apply(absl::Span<const float> sum, absl::Span<float> params) {
  // Compiled with -ffp-contract=off (CMakeLists.txt): no fused multiply-add, so every
  // CPU of a fleet computes the same bits from the same inputs.
  const size_t n = params.size();
  const float lr = options_.outer_lr;
  const float mu = options_.outer_momentum;
  const float keep = 1.0f - lr;  // the share of delta that stays out of the update
  const float lr_mu = lr * mu;
  const bool exact = exchanges_params();
  float* s = start_.data();
  float* buf = momentum_.data();
  double norm_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const float avg = exact ? sum[i] : s[i] - sum[i];
    const float delta = exact ? s[i] - avg : sum[i];
    const float b = mu * buf[i] + delta;
    buf[i] = b;
    const float c = keep * delta - lr_mu * b;
    // Adding a zero correction is skipped rather than trusted to be the identity: -0 + +0
    // is +0, and the parameter's bits must stay avg's.
    const float updated = c == 0.0f ? avg : avg + c;
    params[i] = updated;
    s[i] = updated;
    norm_sq += static_cast<double>(delta) * delta;
  }
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;
  OuterStepFigures f;
  f.pseudo_grad_norm = std::sqrt(norm_sq);
  return f;
}

}  // namespace rt::sync
