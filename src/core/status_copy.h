// FreshCopy: a Status that shares no representation with another one.
//
// The rule for statuses that cross threads: a status stored where another thread
// reads it, and a status handed out from such a store, is a fresh copy. Debian's
// libabsl_status is not built with ThreadSanitizer, so the reference count of a
// shared absl::Status representation is invisible to it: when two threads hold
// copies of one representation, TSan reports the final delete as a race with the
// other thread's copy (seen in CI on TcpConnection's error and in the probe-abort
// test). A fresh copy has a reference count of one, owned by one thread.
// Payloads are not carried over: the project attaches none.
#pragma once

#include "absl/status/status.h"

namespace rt {

inline absl::Status FreshCopy(const absl::Status& status) {
  return absl::Status(status.code(), status.message());
}

}  // namespace rt
