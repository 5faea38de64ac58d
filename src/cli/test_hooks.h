// The test-only fault hooks that fault tests set through the environment of one peer
// (docs/testing.md, "Faults that timing cannot reach"), checked when the binary starts:
// each hook reads its variable only when its code is first reached, which may be
// minutes into a run, so a malformed value (or a misspelt name, which would silently
// leave a fault test without its fault) is refused up front, naming the variable and
// the value. An empty value means unset.
//   RINGTRAIN_TEST_STOP_IN_ALLGATHER  N:before | N:after-own, N >= 1
//   RINGTRAIN_TEST_HOLD_EXCHANGE      PATH whose directory exists
//   RINGTRAIN_TEST_DIAL_VIA           ENDPOINT=HOST:PORT[,ENDPOINT=HOST:PORT...]
//   RINGTRAIN_TEST_SERVE_PAUSE_MS     milliseconds, 0..60000
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "train/ring_gradient_reducer.h"

namespace rt::cli {

// Every RINGTRAIN_TEST_* entry of `env` (NAME, VALUE) is a known hook with a value it
// accepts; else InvalidArgument naming the variable and the value (or the known names).
absl::Status CheckTestHooks(const std::vector<std::pair<std::string, std::string>>& env);
// CheckTestHooks on this process's environment.
absl::Status CheckTestHooksInEnvironment();

// RINGTRAIN_TEST_STOP_IN_ALLGATHER's value; "" = no fault.
absl::StatusOr<train::AllgatherStop> ParseAllgatherStopHook(absl::string_view value);

}  // namespace rt::cli
