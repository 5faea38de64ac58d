// The context the ring reducer (ring_gradient_reducer*.cc) adds to a failed
// collective's error.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rt::train {

// Network errors get the step and a hint: on a ring one failure cascades (each peer
// sees its neighbour leave), so the peer named is not necessarily the one that failed.
inline absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message(),
                                             " (the ring is broken: the first peer to fail "
                                             "logged the cause)"));
}

}  // namespace rt::train
