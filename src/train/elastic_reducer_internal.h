// Helpers shared by the elastic reducer's files (elastic_reducer.cc: the step and its
// boundaries; elastic_reducer_install.cc: installing a view). Not part of its API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cluster/membership.h"
#include "core/clock.h"

namespace rt::train::elastic_internal {

inline int64_t NowMs() { return NowNs() / 1000000; }

// The name of the snapshot section that carries the step counter.
inline constexpr char kStepSection[] = "step";
// How often the wait for a view polls for decisions and signals, and logs.
inline constexpr absl::Duration kPoll = absl::Milliseconds(100);
inline constexpr int64_t kWaitLogEveryMs = 10000;
// How often a ring formation checks for a newer decision.
inline constexpr absl::Duration kFormPoll = absl::Milliseconds(20);

inline std::string Names(const std::vector<cluster::PeerId>& peers) {
  return peers.empty() ? "none" : absl::StrJoin(peers, " ");
}

}  // namespace rt::train::elastic_internal
