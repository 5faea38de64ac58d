// RoundBalancer: the slot shares of round sync's inner steps (--outer-every H with
// --balance on), sized by each peer's measured speed so that every peer reaches the
// outer step at about the same moment.
//
// Per-step sync re-plans its split after every step from figures that travel in the
// step's exact sum (train/slot_balancer.h). Round sync has no exchange between outer
// steps, so its plan is made once per round, at the outer step, and holds for the H
// inner steps of the next round:
//   - during a round each peer adds up the forward+backward seconds and the slots of
//     its own inner steps (AddInnerStep);
//   - at the round's end every peer reports its figures (RoundFigures: the round's
//     compute seconds, its speed in seconds per slot, the share it was given) and the
//     ring gathers them exactly (GradientReducer::AllgatherInt64s: the same integers
//     on every peer, doubles carried by their bits);
//   - the next round's shares are PlanShares(those figures): a pure function of what
//     every peer received, and of nothing this peer kept on its own, so every peer
//     computes the same plan, bit for bit, even if their histories differ (a restart,
//     a failed step). The current split (for the hysteresis) is the reported one.
// A peer's speed is its own last measurement over a whole round (H steps: smooth enough
// without the per-step moving average), kept across rounds and views while it trains
// no slot; a peer never measured reports none, and the split then stays as it is.
//
// The plan belongs to the view it was made in: in another view (a peer died, joined or
// came back) the shares are the equal split until the next outer step's plan; a
// resumed run (checkpoints do not hold the plan: the speeds are those of the processes
// and machines of one run) starts equal and plans at its first outer step.
//
// Which slots a position takes (SlotsOf): the equal split is BatchSampler::SlotsOf's
// strided one (round sync's slots as without balancing, so an equal plan trains the
// same bits); any other split gives each position a contiguous range in ring order.
// Either way the positions' slots partition [0, global batch): no slot of an inner step
// is trained twice or left out (as long as the peers agree on the plan, which the
// report's `share` lets every peer check).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "train/slot_balancer.h"

namespace rt::train {

// One ring position's figures at an outer step.
struct RoundFigures {
  double compute_s = 0;          // forward+backward seconds of its inner steps in the round
  double seconds_per_slot = -1;  // its speed (the last round in which it trained); <= 0: none
  int share = 0;                 // slots per inner step it was given in the round

  static constexpr size_t kValues = 3;
  // As exchanged: the two doubles' bit patterns, then the share.
  std::array<int64_t, kValues> Encode() const;
  // A peer's values (from the ring): InvalidArgument naming `position` for a wrong
  // count, a speed or time that is not a finite number (>= 0, or -1 for "none"), or a
  // share outside [0, global_slots].
  static absl::StatusOr<RoundFigures> Decode(absl::Span<const int64_t> values, int position,
                                             int global_slots);
};

class RoundBalancer {
 public:
  RoundBalancer(int global_slots, BalanceOptions options);

  // The shares (slots per ring position) of an inner step of the view of epoch `epoch`
  // whose members (ids, e.g. hosts-file ranks) are `members` in ring order: the last
  // plan if it was made in that view (kept by id, so a ring that re-orders itself after
  // a link probe keeps each peer's share), else the equal split. Sums to the global batch.
  std::vector<int> Shares(const std::vector<int>& members, uint64_t epoch) const;

  // An inner step of this peer was applied: `compute_s` seconds of forward+backward
  // over `slots` of its slots.
  void AddInnerStep(double compute_s, int slots);

  // At an outer step: this peer's figures, at ring position `position` of the view
  // (`members`, `epoch`). Closes the round's measurement (its seconds per slot become
  // this peer's speed if it trained any slot).
  RoundFigures Report(const std::vector<int>& members, int position, uint64_t epoch);

  // Every position's figures (agreed; indexed like `members`) of the round that ended
  // at step count `steps_done`, the `round`-th outer step: the plan of the next round's
  // inner steps in the view (`members`, `epoch`), logged when it changes. Returns
  // PlanShares(...).
  std::vector<int> Plan(const std::vector<RoundFigures>& all, const std::vector<int>& members,
                        uint64_t epoch, int64_t round, int64_t steps_done);

  // The plan itself, a pure function: the reported shares are the current split (the
  // equal split if they do not sum to `global_slots`: the peers disagreed, or a view
  // changed during the round); if every position has a speed, SlotBalancer::Rebalanced
  // moves from it; in every `remeasure_every`-th round a position at 0 slots is lent
  // one (SlotBalancer::LendForRemeasure). --balance off or one peer: the equal split.
  static std::vector<int> PlanShares(int global_slots, const BalanceOptions& options,
                                     const std::vector<RoundFigures>& all, int64_t round);

  // The slots of ring position `position` under `shares` (see the file comment).
  static std::vector<int> SlotsOf(const std::vector<int>& shares, int position);

  // The time this peer idled at the outer step: the slowest position's compute of the
  // round minus its own (seconds, >= 0). Metrics `wait_ms` of outer steps.
  static double WaitSeconds(const std::vector<RoundFigures>& all, int position);

 private:
  int global_slots_;
  BalanceOptions options_;
  std::map<int, int> plan_;  // member id -> share of the next inner steps (empty: none yet)
  uint64_t plan_epoch_ = 0;  // the view it belongs to
  double round_compute_s_ = 0;
  int64_t round_slots_ = 0;
  double seconds_per_slot_ = -1;  // this peer's last measured speed
};

}  // namespace rt::train
