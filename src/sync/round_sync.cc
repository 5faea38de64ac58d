// The outer step of round sync and its schedule (see round_sync.h).
#include "sync/round_sync.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace rt::sync {
namespace {

// One coordinate of the outer step (round_sync.h): from the exchange's sum, the shared
// start and the momentum, the new shared value, the new momentum and delta.
struct OuterValue {
  float updated, momentum, delta;
};
inline OuterValue OuterAt(float sum, float start, float buf, float keep, float mu, float lr_mu,
                          bool exact) {
  const float avg = exact ? sum : start - sum;
  const float delta = exact ? start - avg : sum;
  const float b = mu * buf + delta;
  const float c = keep * delta - lr_mu * b;
  // Adding a zero correction is skipped rather than trusted to be the identity: -0 + +0
  // is +0, and the parameter's bits must stay avg's.
  return {c == 0.0f ? avg : avg + c, b, delta};
}

// A replica rebased onto the new shared value: local + (shared - anchor), skipped
// where that is 0 (a replica's -0 stays -0).
inline float Rebased(float local, float shared, float anchor) {
  const float correction = shared - anchor;
  return correction != 0.0f ? local + correction : local;
}

}  // namespace

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
  if (after < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--outer-after must be >= 0 steps (0 = round sync from the start), got %d", after));
  }
  if (after > 0 && every == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--outer-after %d switches to round sync at step %d: give --outer-every H > 0 too", after,
        after));
  }
  if (!(inner_lr_scale > 0) || !std::isfinite(inner_lr_scale) || inner_lr_scale > 10) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--inner-lr-scale must be in (0, 10], got %g", inner_lr_scale));
  }
  if (shard && codec.kind != collective::CodecKind::kNone) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--outer-shard on works with --outer-compress none only: a lossy codec's allgather "
        "carries the compressed sum, and sharding the outer step would make it carry fp32 "
        "parameters instead (%s exists to avoid those bytes)",
        codec.ToString()));
  }
  if (shard && overlap) {
    return absl::InvalidArgumentError(
        "--outer-shard on works with --outer-overlap off only: with overlap every peer needs "
        "the whole round-start copy to rebase its replica onto the delayed outer step");
  }
  if (inner_lr_scale != 1.0f && every == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--inner-lr-scale %g scales round sync's inner steps: give --outer-every H > 0 too "
        "(per-step sync takes --lr as it is)",
        inner_lr_scale));
  }
  return absl::OkStatus();
}

std::string RoundSyncOptions::ToString() const {
  return absl::StrFormat("every=%d lr=%g momentum=%g compress=%s%s%s%s%s", every, outer_lr,
                         outer_momentum, codec.ToString(), overlap ? " overlap=on" : "",
                         after > 0 ? absl::StrFormat(" after=%d", after) : std::string(),
                         inner_lr_scale != 1.0f
                             ? absl::StrFormat(" inner_lr_scale=%g", inner_lr_scale)
                             : std::string(),
                         shard ? " shard=on" : "");
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

int64_t PackedOffset(const std::vector<std::pair<size_t, size_t>>& pieces, size_t index) {
  // The first piece that ends after index (pieces are sorted and disjoint).
  auto it =
      std::upper_bound(pieces.begin(), pieces.end(), index,
                       [](size_t i, const std::pair<size_t, size_t>& r) { return i < r.second; });
  if (it == pieces.end() || index < it->first) return -1;
  int64_t packed = 0;
  for (auto p = pieces.begin(); p != it; ++p) packed += static_cast<int64_t>(p->second - p->first);
  return packed + static_cast<int64_t>(index - it->first);
}

RoundSync::RoundSync(RoundSyncOptions options, size_t floats) : options_(options) {
  // Sharded, nothing is held before the trainer knows the ring (SetPieces).
  if (options_.shard) return;
  start_.Resize(floats);
  momentum_.Resize(floats);
  momentum_.Zero();
  if (options_.overlap) {
    anchor_.Resize(floats);
    exchange_.Resize(floats);
  }
}

void RoundSync::SetPieces(std::vector<FloatRange> pieces, AlignedBuffer<float> start,
                          AlignedBuffer<float> momentum) {
  pieces_ = std::move(pieces);
  start_ = std::move(start);
  momentum_ = std::move(momentum);
}

double RoundSync::StageOuterStep(absl::Span<float> sum_to_new, absl::Span<float> staged,
                                 const std::vector<FloatRange>& norm_pieces) const {
  // The same arithmetic as OuterUpdate, coordinate by coordinate (-ffp-contract=off).
  const float mu = options_.outer_momentum;
  const float keep = 1.0f - options_.outer_lr;
  const float lr_mu = options_.outer_lr * mu;
  const float* s = start_.data();
  const float* buf = momentum_.data();
  double norm_sq = 0;
  size_t packed = 0;
  size_t next_norm = 0;  // norm_pieces are sorted, a subset of pieces_
  for (const FloatRange& r : pieces_) {
    while (next_norm < norm_pieces.size() && norm_pieces[next_norm].second <= r.first) ++next_norm;
    for (size_t i = r.first; i < r.second; ++i, ++packed) {
      const OuterValue v = OuterAt(sum_to_new[i], s[packed], buf[packed], keep, mu, lr_mu, true);
      staged[packed] = v.momentum;
      sum_to_new[i] = v.updated;
      if (next_norm < norm_pieces.size() && i >= norm_pieces[next_norm].first &&
          i < norm_pieces[next_norm].second) {
        norm_sq += static_cast<double>(v.delta) * v.delta;
      }
    }
  }
  return norm_sq;
}

void RoundSync::StageNoOuterStep(absl::Span<float> sum_to_new, absl::Span<float> staged) const {
  size_t packed = 0;
  for (const FloatRange& r : pieces_) {
    for (size_t i = r.first; i < r.second; ++i, ++packed) {
      sum_to_new[i] = start_[packed];
      staged[packed] = momentum_[packed];
    }
  }
}

void RoundSync::CommitOuterStep(AlignedBuffer<float>* staged, absl::Span<const float> params) {
  if (staged != nullptr) std::swap(momentum_, *staged);
  BeginRound(params);
}

void RoundSync::BeginRound(absl::Span<const float> params) {
  if (sharded()) {
    size_t packed = 0;
    for (const FloatRange& r : pieces_) {
      std::copy(params.begin() + r.first, params.begin() + r.second, start_.data() + packed);
      packed += r.second - r.first;
    }
  } else {
    std::copy(params.begin(), params.end(), start_.data());
  }
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;
  DropPending();
}

void RoundSync::Restart(absl::Span<const float> params) {
  momentum_.Zero();
  BeginRound(params);
  replaced_ = false;
  inner_loss_ = 0;
}

void RoundSync::ForgetRound() {
  round_tokens_ = 0;
  pending_tokens_ = 0;
  inner_done_step_ = -1;
  replaced_ = true;
}

void RoundSync::AfterReplacedState(bool at_round_start, absl::Span<float> params) {
  replaced_ = false;
  if (at_round_start && !has_pending()) {
    BeginRound(params);  // a drained round's end (or none yet): params == start, shared
    return;
  }
  // The received replica is one peer's own (mid-round; or, with overlap, a round's end
  // whose exchange is pending: the serving peer's replica carries its own round, which
  // that peer contributes). Back to the shared copy G (start); with overlap, the anchor
  // too and no tokens in the pending round: this peer takes part in its redo with weight
  // 0 and the rebase at the outer step brings it to the new shared copy. The pending
  // flag stays as received (every peer of the ring redoes that exchange). Sharded, no
  // whole start is here: the replica stays (weight 0; the allgather replaces it).
  if (!sharded()) std::copy(start_.data(), start_.data() + params.size(), params.begin());
  if (options_.overlap) std::copy(start_.data(), start_.data() + anchor_.size(), anchor_.data());
  round_tokens_ = 0;
  pending_tokens_ = 0;
  inner_done_step_ = -1;
  // At a round's end (overlap, pending) the new round begins from G here: nothing to
  // sit out. Mid-round the rest of the round is sat out.
  sitting_out_ = !at_round_start;
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

OuterStepFigures RoundSync::OuterUpdate(absl::Span<const float> sum, float* out) {
  // Compiled with -ffp-contract=off (CMakeLists.txt): no fused multiply-add, so every
  // CPU of a fleet computes the same bits from the same inputs.
  const size_t n = start_.size();
  const float mu = options_.outer_momentum;
  const float keep = 1.0f - options_.outer_lr;  // the share of delta that stays out
  const float lr_mu = options_.outer_lr * mu;
  const bool exact = exchanges_params();
  float* s = start_.data();
  float* buf = momentum_.data();
  double norm_sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const OuterValue v = OuterAt(sum[i], s[i], buf[i], keep, mu, lr_mu, exact);
    buf[i] = v.momentum;
    if (out != nullptr) out[i] = v.updated;
    s[i] = v.updated;
    norm_sq += static_cast<double>(v.delta) * v.delta;
  }
  OuterStepFigures f;
  f.pseudo_grad_norm = std::sqrt(norm_sq);
  return f;
}

OuterStepFigures RoundSync::Apply(absl::Span<const float> sum, absl::Span<float> params) {
  const OuterStepFigures f = OuterUpdate(sum, params.data());
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;
  return f;
}

void RoundSync::SkipOuterStep(absl::Span<float> params) {
  std::copy(start_.data(), start_.data() + params.size(), params.begin());
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;
}

void RoundSync::Launch(absl::Span<const float> params) {
  std::copy(params.begin(), params.end(), anchor_.data());
  pending_flag_[0] = 1.0f;
  pending_tokens_ = round_tokens_;
  round_tokens_ = 0;
  inner_done_step_ = -1;
  sitting_out_ = false;  // a peer that sat the round out trains in the next one
}

void RoundSync::Recontribute(float weight) {
  Contribution(anchor_.span(), weight, exchange_.span());
}

OuterStepFigures RoundSync::ApplyDelayed(absl::Span<const float> sum, absl::Span<float> params) {
  const OuterStepFigures f = OuterUpdate(sum, nullptr);
  const size_t n = params.size();
  const float* s = start_.data();
  const float* a = anchor_.data();
  for (size_t i = 0; i < n; ++i) params[i] = Rebased(params[i], s[i], a[i]);
  DropPending();
  return f;
}

void RoundSync::DrainContribution(absl::Span<const float> pending_sum,
                                  absl::Span<const float> params, float weight,
                                  absl::Span<float> out) const {
  const size_t n = params.size();
  const float mu = options_.outer_momentum;
  const float keep = 1.0f - options_.outer_lr;
  const float lr_mu = options_.outer_lr * mu;
  const bool exact = exchanges_params();
  const float* s = start_.data();
  const float* buf = momentum_.data();
  const float* a = anchor_.data();
  for (size_t i = 0; i < n; ++i) {
    const float shared = OuterAt(pending_sum[i], s[i], buf[i], keep, mu, lr_mu, exact).updated;
    const float local = Rebased(params[i], shared, a[i]);
    out[i] = exact ? weight * local : weight * (shared - local);
  }
}

void RoundSync::DropPending() {
  pending_flag_[0] = 0.0f;
  pending_tokens_ = 0;
}

}  // namespace rt::sync
