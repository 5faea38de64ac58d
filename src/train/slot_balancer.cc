// Speed-proportional split of a step's slots among peers (see slot_balancer.h).
#include "train/slot_balancer.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/log.h"

namespace rt::train {

SlotBalancer::SlotBalancer(int global_slots, BalanceOptions options)
    : global_slots_(global_slots), options_(options) {}

std::vector<int> SlotBalancer::EqualShares(int global_slots, int peers) {
  std::vector<int> shares(static_cast<size_t>(std::max(peers, 0)));
  for (int p = 0; p < peers; ++p) shares[p] = global_slots / peers + (p < global_slots % peers);
  return shares;
}

std::vector<int> SlotBalancer::ContiguousSlots(const std::vector<int>& shares, int position) {
  int first = 0;
  for (int p = 0; p < position; ++p) first += shares[p];
  std::vector<int> out;
  for (int i = 0; i < shares[position]; ++i) out.push_back(first + i);
  return out;
}

std::vector<int> SlotBalancer::BestShares(int global_slots,
                                          const std::vector<double>& seconds_per_slot,
                                          const std::vector<int>& min_share) {
  std::vector<int> shares = min_share;
  int left = global_slots;
  for (int s : shares) left -= s;
  // Greedy: each further slot goes to the peer that would finish its share + 1 first.
  // Adding slots in this order yields a split that minimises the largest finish time
  // (each choice keeps the maximum as small as any split with this many slots can).
  for (; left > 0; --left) {
    size_t best = 0;
    double best_end = 0;
    for (size_t p = 0; p < shares.size(); ++p) {
      const double end = (shares[p] + 1) * seconds_per_slot[p];
      if (p == 0 || end < best_end) {
        best = p;
        best_end = end;
      }
    }
    ++shares[best];
  }
  return shares;
}

double SlotBalancer::PredictedSeconds(const std::vector<int>& shares,
                                      const std::vector<double>& seconds_per_slot) {
  double worst = 0;
  for (size_t p = 0; p < shares.size(); ++p) {
    worst = std::max(worst, shares[p] * seconds_per_slot[p]);
  }
  return worst;
}

std::vector<int> SlotBalancer::Rebalanced(int global_slots, const BalanceOptions& options,
                                          const std::vector<double>& t,
                                          const std::vector<int>& current) {
  const int n = static_cast<int>(t.size());
  const double fastest = *std::min_element(t.begin(), t.end());
  std::vector<int> min_share(n);
  int eligible = 0;
  for (int p = 0; p < n; ++p) {
    min_share[p] = t[p] <= options.max_skew * fastest ? 1 : 0;
    eligible += min_share[p];
  }
  if (eligible > global_slots) std::fill(min_share.begin(), min_share.end(), 0);
  const std::vector<int> best = BestShares(global_slots, t, min_share);
  const double now_s = PredictedSeconds(current, t), best_s = PredictedSeconds(best, t);
  return best != current && best_s < now_s * (1 - options.min_gain) ? best : current;
}

void SlotBalancer::LendForRemeasure(std::vector<int>* shares) {
  std::vector<int>& s = *shares;
  for (size_t p = 0; p < s.size(); ++p) {
    if (s[p] != 0) continue;
    const size_t donor = static_cast<size_t>(std::max_element(s.begin(), s.end()) - s.begin());
    --s[donor];
    s[p] = 1;
  }
}

void SlotBalancer::Reset() {
  seconds_per_slot_.clear();
  current_.clear();
}

double SlotBalancer::seconds_per_slot(int id) const {
  auto it = seconds_per_slot_.find(id);
  return it == seconds_per_slot_.end() ? -1.0 : it->second;
}

std::vector<int> SlotBalancer::SharesOf(const std::vector<int>& members) const {
  if (current_.empty()) return EqualShares(global_slots_, static_cast<int>(members.size()));
  std::vector<int> shares;
  for (int id : members) shares.push_back(current_.at(id));
  return shares;
}

std::string SlotBalancer::Describe(const std::vector<int>& members,
                                   const std::vector<int>& shares) const {
  std::string out;
  for (size_t p = 0; p < members.size(); ++p) {
    absl::StrAppendFormat(&out, "%speer %d: %d (%.2f ms/slot)", p == 0 ? "" : ", ", members[p],
                          shares[p], seconds_per_slot(members[p]) * 1e3);
  }
  return out;
}

std::vector<int> SlotBalancer::Assign(const std::vector<int>& members, int64_t step) {
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != members_sorted_) {  // a new view: what was measured belongs to another ring
    Reset();
    members_sorted_ = std::move(sorted);
  }
  const int n = static_cast<int>(members.size());
  if (!options_.enabled || n <= 1) return EqualShares(global_slots_, n);
  std::vector<double> t;
  for (int id : members) {
    const double s = seconds_per_slot(id);
    if (!(s > 0)) return SharesOf(members);  // someone is not measured yet
    t.push_back(s);
  }
  std::vector<int> shares = SharesOf(members);
  const std::vector<int> best = Rebalanced(global_slots_, options_, t, shares);
  if (best != shares) {
    LogInfo("step %d: load balancing: slots %s (was %s); predicted compute %.1f ms -> %.1f ms",
            step + 1, Describe(members, best), Describe(members, shares),
            PredictedSeconds(shares, t) * 1e3, PredictedSeconds(best, t) * 1e3);
    current_.clear();
    for (int p = 0; p < n; ++p) current_[members[p]] = best[p];
    shares = best;
  }

  // A peer at 0 slots is never measured again: lend it one slot now and then, taken
  // from the largest share (lowest position on ties). Not kept as the current split.
  if (options_.remeasure_every > 0 && step % options_.remeasure_every == 0 && n <= global_slots_) {
    LendForRemeasure(&shares);
  }
  return shares;
}

void SlotBalancer::Observe(const std::vector<int>& members, const std::vector<double>& compute_s,
                           const std::vector<int>& slots) {
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != members_sorted_ || compute_s.size() != members.size() ||
      slots.size() != members.size()) {
    return;  // not the members Assign saw: nothing to learn
  }
  for (size_t p = 0; p < members.size(); ++p) {
    if (slots[p] <= 0 || !(compute_s[p] > 0)) continue;
    const double x = compute_s[p] / slots[p];
    auto it = seconds_per_slot_.find(members[p]);
    if (it == seconds_per_slot_.end()) {
      seconds_per_slot_[members[p]] = x;
    } else {
      it->second = (1 - options_.smoothing) * it->second + options_.smoothing * x;
    }
  }
}

}  // namespace rt::train
