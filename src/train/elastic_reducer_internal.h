// Helpers shared by the elastic reducer's files (elastic_reducer.cc: the step and its
// boundaries; elastic_reducer_install.cc: installing a view). Not part of its API.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace rt::train::elastic_internal {

// The name of the snapshot section that carries the step counter.
inline constexpr char kStepSection[] = "step";
// How often the wait for a view polls for decisions and signals, and logs.
inline constexpr absl::Duration kPoll = absl::Milliseconds(100);
inline constexpr int64_t kWaitLogEveryMs = 10000;
// How often a ring formation checks for a newer decision.
inline constexpr absl::Duration kFormPoll = absl::Milliseconds(20);

}  // namespace rt::train::elastic_internal
