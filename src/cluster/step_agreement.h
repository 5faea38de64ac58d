// Step agreement: from the training state each member reports when a view forms,
// decide where the new view resumes and who must receive state first.
//
// A peer's training state is named by a StateVersion: the number of optimizer steps
// it has completed and the epoch of the view in which it completed the last one. A
// state produced in a later view supersedes one from an earlier view (the later
// view is the quorum's line of history), so versions compare by (epoch, step).
// A peer with no usable state at all (a fresh joiner that loaded nothing) reports
// step = -1.
//
// Replicas of one view are bit-identical, so members with equal versions hold equal
// bytes. When a failure interrupts a step, some survivors may have completed it and
// others not: the view resumes from the newest version any member holds (nobody
// redoes more than the interrupted step, nobody has to roll back), and members with
// an older version — lagging survivors, joiners, peers restarted from an older
// checkpoint — receive the state from `source`, the lowest-ranked member holding it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cluster/view.h"

namespace rt::cluster {

struct StateVersion {
  uint64_t epoch = 0;
  int64_t step = 0;  // optimizer steps completed; -1 = no state
  bool operator==(const StateVersion& o) const { return epoch == o.epoch && step == o.step; }
  bool operator!=(const StateVersion& o) const { return !(*this == o); }
  bool operator<(const StateVersion& o) const {
    return epoch != o.epoch ? epoch < o.epoch : step < o.step;
  }
  std::string ToString() const;  // "step 120 (epoch 4)" / "no state"
};

struct StepAgreement {
  StateVersion resume;             // the state every member continues from
  PeerId source;                   // lowest-ranked member already holding `resume`
  int64_t min_step = 0;            // the last step every member completed (min over reports)
  std::vector<PeerId> need_state;  // members (rank order) whose version != resume
};

// `members` in rank order; `reports` must hold one entry per member (extra entries
// are ignored). InvalidArgument if a member has no report, FailedPrecondition if no
// member holds any state (every report has step -1).
absl::StatusOr<StepAgreement> AgreeOnResume(const std::vector<PeerId>& members,
                                            const std::map<PeerId, StateVersion>& reports);

}  // namespace rt::cluster
