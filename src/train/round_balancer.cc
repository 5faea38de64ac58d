// Round sync's per-round slot shares by measured speed (see round_balancer.h).
#include "train/round_balancer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/log.h"

namespace rt::train {
namespace {

int64_t DoubleBits(double x) {
  int64_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

double BitsDouble(int64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

std::string Describe(const std::vector<int>& shares, const std::vector<int>& members,
                     const std::vector<RoundFigures>& all) {
  std::string out;
  for (size_t p = 0; p < shares.size(); ++p) {
    absl::StrAppendFormat(&out, "%speer %d: %d", p == 0 ? "" : ", ", members[p], shares[p]);
    if (all[p].seconds_per_slot > 0) {
      absl::StrAppendFormat(&out, " (%.2f ms/slot)", all[p].seconds_per_slot * 1e3);
    }
  }
  return out;
}

}  // namespace

std::array<int64_t, RoundFigures::kValues> RoundFigures::Encode() const {
  return {DoubleBits(compute_s), DoubleBits(seconds_per_slot), share};
}

absl::StatusOr<RoundFigures> RoundFigures::Decode(absl::Span<const int64_t> values, int position,
                                                  int global_slots) {
  if (values.size() != kValues) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring position %d sent %d values for the round's balance figures, not %d",
                        position, values.size(), kValues));
  }
  RoundFigures f;
  f.compute_s = BitsDouble(values[0]);
  f.seconds_per_slot = BitsDouble(values[1]);
  if (!std::isfinite(f.compute_s) || f.compute_s < 0 || !std::isfinite(f.seconds_per_slot) ||
      (f.seconds_per_slot <= 0 && f.seconds_per_slot != -1) || values[2] < 0 ||
      values[2] > global_slots) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ring position %d sent balance figures out of range: compute %g s, %g s per slot, "
        "share %d of %d slots",
        position, f.compute_s, f.seconds_per_slot, values[2], global_slots));
  }
  f.share = static_cast<int>(values[2]);
  return f;
}

RoundBalancer::RoundBalancer(int global_slots, BalanceOptions options)
    : global_slots_(global_slots), options_(options) {}

std::vector<int> RoundBalancer::Shares(const std::vector<int>& members, uint64_t epoch) const {
  const int n = static_cast<int>(members.size());
  if (plan_.empty() || epoch != plan_epoch_ || plan_.size() != members.size()) {
    return SlotBalancer::EqualShares(global_slots_, n);
  }
  std::vector<int> shares;
  for (int id : members) {
    auto it = plan_.find(id);
    if (it == plan_.end()) return SlotBalancer::EqualShares(global_slots_, n);
    shares.push_back(it->second);
  }
  return shares;
}

void RoundBalancer::AddInnerStep(double compute_s, int slots) {
  if (slots <= 0) return;  // nothing measured
  round_compute_s_ += compute_s;
  round_slots_ += slots;
}

RoundFigures RoundBalancer::Report(const std::vector<int>& members, int position, uint64_t epoch) {
  RoundFigures f;
  f.compute_s = round_compute_s_;
  if (round_slots_ > 0 && round_compute_s_ > 0) {
    seconds_per_slot_ = round_compute_s_ / static_cast<double>(round_slots_);
  }
  f.seconds_per_slot = seconds_per_slot_;
  const std::vector<int> shares = Shares(members, epoch);
  f.share = position >= 0 && position < static_cast<int>(shares.size()) ? shares[position] : 0;
  round_compute_s_ = 0;
  round_slots_ = 0;
  return f;
}

std::vector<int> RoundBalancer::PlanShares(int global_slots, const BalanceOptions& options,
                                           const std::vector<RoundFigures>& all, int64_t round) {
  const int n = static_cast<int>(all.size());
  const std::vector<int> equal = SlotBalancer::EqualShares(global_slots, n);
  if (!options.enabled || n <= 1) return equal;
  std::vector<int> shares;
  int sum = 0;
  for (const RoundFigures& f : all) {
    shares.push_back(f.share);
    sum += f.share;
  }
  if (sum != global_slots) shares = equal;  // no agreed split to go on from
  std::vector<double> t;
  for (const RoundFigures& f : all) t.push_back(f.seconds_per_slot);
  if (std::all_of(t.begin(), t.end(), [](double s) { return s > 0; })) {
    shares = SlotBalancer::Rebalanced(global_slots, options, t, shares);
  }
  if (options.remeasure_every > 0 && round % options.remeasure_every == 0 && n <= global_slots) {
    SlotBalancer::LendForRemeasure(&shares);
  }
  return shares;
}

std::vector<int> RoundBalancer::Plan(const std::vector<RoundFigures>& all,
                                     const std::vector<int>& members, uint64_t epoch, int64_t round,
                                     int64_t steps_done) {
  std::vector<int> reported;
  for (const RoundFigures& f : all) reported.push_back(f.share);
  if (std::accumulate(reported.begin(), reported.end(), 0) != global_slots_) {
    LogInfo(
        "step %d: the peers' shares of the round's inner steps do not make up the global batch "
        "(%d slots): %s; the next round's plan starts from the equal split",
        steps_done, global_slots_, Describe(reported, members, all));
  }
  std::vector<int> next = PlanShares(global_slots_, options_, all, round);
  const std::vector<int> before = Shares(members, epoch);
  if (next != before) {
    std::vector<double> t;
    for (const RoundFigures& f : all) t.push_back(f.seconds_per_slot);
    const bool measured = std::all_of(t.begin(), t.end(), [](double s) { return s > 0; });
    LogInfo("step %d: load balancing of the inner steps from step %d: slots %s (was %s)%s",
            steps_done, steps_done + 1, Describe(next, members, all),
            Describe(before, members, all),
            measured ? absl::StrFormat("; predicted compute per inner step %.1f ms -> %.1f ms",
                                       SlotBalancer::PredictedSeconds(before, t) * 1e3,
                                       SlotBalancer::PredictedSeconds(next, t) * 1e3)
                     : std::string());
  }
  plan_.clear();
  for (size_t p = 0; p < members.size() && p < next.size(); ++p) plan_[members[p]] = next[p];
  plan_epoch_ = epoch;
  return next;
}

std::vector<int> RoundBalancer::SlotsOf(const std::vector<int>& shares, int position) {
  const int n = static_cast<int>(shares.size());
  std::vector<int> out;
  if (position < 0 || position >= n) return out;
  const int slots = std::accumulate(shares.begin(), shares.end(), 0);
  if (shares == SlotBalancer::EqualShares(slots, n)) {
    // BatchSampler::SlotsOf's strided split: position, position + n, ...
    for (int s = position; s < slots; s += n) out.push_back(s);
    return out;
  }
  return SlotBalancer::ContiguousSlots(shares, position);
}

double RoundBalancer::WaitSeconds(const std::vector<RoundFigures>& all, int position) {
  if (position < 0 || position >= static_cast<int>(all.size())) return 0;
  double slowest = 0;
  for (const RoundFigures& f : all) slowest = std::max(slowest, f.compute_s);
  return std::max(0.0, slowest - all[position].compute_s);
}

}  // namespace rt::train
