// Step agreement (see step_agreement.h).
#include "cluster/step_agreement.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rt::cluster {

std::string StateVersion::ToString() const {
  if (step < 0) return "no state";
  return absl::StrFormat("step %d (epoch %d)", step, epoch);
}

absl::StatusOr<StepAgreement> AgreeOnResume(const std::vector<PeerId>& members,
                                            const std::map<PeerId, StateVersion>& reports) {
  if (members.empty()) return absl::InvalidArgumentError("step agreement over no members");
  StepAgreement a;
  a.min_step = std::numeric_limits<int64_t>::max();
  bool any_state = false;
  for (const PeerId& m : members) {
    auto it = reports.find(m);
    if (it == reports.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no state report from member ", m));
    }
    a.min_step = std::min(a.min_step, it->second.step);
    if (it->second.step < 0) continue;
    // Strictly newer only: ties keep the lower-ranked (earlier) member as source.
    if (!any_state || a.resume < it->second) {
      a.resume = it->second;
      a.source = m;
      any_state = true;
    }
  }
  if (!any_state) {
    return absl::FailedPreconditionError("no member holds any training state");
  }
  for (const PeerId& m : members) {
    if (reports.at(m) != a.resume) a.need_state.push_back(m);
  }
  return a;
}

}  // namespace rt::cluster
