// SlotBalancer: how many of a step's global-batch slots (sequences) each live peer
// trains on, in proportion to its measured speed (--balance).
//
// Contract: every peer of a ring holds its own SlotBalancer and feeds it the SAME
// inputs (the members in ring order, and after each step the figures of every peer,
// which travel in the step's exact sum, StepTotals::peer_*); the balancer is a pure
// function of those inputs, so every peer computes the same assignment without any
// extra message. It never changes the math of a step: which peer computes which slot
// does not matter (DESIGN invariant 3); only how long the step takes.
//
// Method, per step:
//   - each peer's seconds per slot (compute time of forward+backward over its share,
//     divided by the share) is smoothed with an exponential moving average;
//   - the best integer split is the one that minimises the predicted step time
//     max_p(share_p * seconds_per_slot_p) (greedy: the next slot goes to the peer that
//     would finish it first), every peer at least one slot unless it is more than
//     `max_skew` times slower than the fastest (then 0, or when the global batch has
//     fewer slots than there are peers);
//   - hysteresis: the split changes only when the best one predicts a step time more
//     than `min_gain` shorter than the current one, so measurement noise does not
//     make shares flap; every change is logged with the figures behind it;
//   - a peer left at 0 slots gets 1 slot every `remeasure_every` steps, so it is seen
//     again when it becomes fast.
// Until every member has been measured, and whenever the members change (a new view)
// or Reset() is called (a failed step), the split is equal: position p of N gets
// G/N slots, plus one if p < G%N.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rt::train {

struct BalanceOptions {
  bool enabled = true;       // --balance; false = always the equal split
  double max_skew = 8;       // --max-skew: slower than this x the fastest -> 0 slots
  double smoothing = 0.4;    // weight of the newest measurement in the moving average
  double min_gain = 0.05;    // switch only if the predicted step time improves by > 5%
  int remeasure_every = 16;  // steps between re-measurements of a peer left at 0 slots
};

class SlotBalancer {
 public:
  SlotBalancer(int global_slots, BalanceOptions options);

  // The shares (slots per ring position; the same order as `members`, the peers' ids
  // in ring order) of optimizer step `step` (0-based). Sums to the global batch.
  std::vector<int> Assign(const std::vector<int>& members, int64_t step);

  // After a step: the agreed figures of every ring position (the same order as the
  // members given to Assign): compute seconds of forward+backward and slots trained.
  // Positions with 0 slots carry no measurement.
  void Observe(const std::vector<int>& members, const std::vector<double>& compute_s,
               const std::vector<int>& slots);

  // Forget every measurement and the current split (a step failed: peers may have
  // seen different figures).
  void Reset();

  // Smoothed seconds per slot of peer `id`; negative when not measured yet.
  double seconds_per_slot(int id) const;

  // The equal split of `global_slots` over `peers` positions.
  static std::vector<int> EqualShares(int global_slots, int peers);
  // The slots of ring position `position` when each position takes a contiguous range
  // in ring order: sum(shares[0..position)) .. + shares[position] - 1. Position in range.
  static std::vector<int> ContiguousSlots(const std::vector<int>& shares, int position);
  // The split of `global_slots` minimising max_p(share_p * seconds_per_slot[p]), with
  // share_p >= min_share[p] (callers make sum(min_share) <= global_slots); ties go to
  // the lower position. seconds_per_slot must be positive.
  static std::vector<int> BestShares(int global_slots, const std::vector<double>& seconds_per_slot,
                                     const std::vector<int>& min_share);
  // max_p(shares[p] * seconds_per_slot[p]).
  static double PredictedSeconds(const std::vector<int>& shares,
                                 const std::vector<double>& seconds_per_slot);
  // The split to use instead of `current` given every position's `seconds_per_slot`
  // (all positive): BestShares, every position at least one slot unless it is more
  // than max_skew times slower than the fastest (or the peers outnumber the slots), if
  // it predicts a time more than min_gain shorter than `current`; else `current`.
  // What Assign does per step and round sync's plan (train/round_balancer.h) per round.
  static std::vector<int> Rebalanced(int global_slots, const BalanceOptions& options,
                                     const std::vector<double>& seconds_per_slot,
                                     const std::vector<int>& current);
  // Lends one slot to every position at 0 (each taken from the largest share, the
  // lowest position on ties), so that it is measured again; needs at most as many
  // positions as slots.
  static void LendForRemeasure(std::vector<int>* shares);

 private:
  // Shares by member id for the current set of members.
  std::vector<int> SharesOf(const std::vector<int>& members) const;
  std::string Describe(const std::vector<int>& members, const std::vector<int>& shares) const;

  int global_slots_;
  BalanceOptions options_;
  std::vector<int> members_sorted_;         // the member set the state below belongs to
  std::map<int, double> seconds_per_slot_;  // id -> smoothed seconds per slot
  std::map<int, int> current_;              // id -> share; empty = the equal split
};

}  // namespace rt::train
