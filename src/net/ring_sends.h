// Giving a collective's queued sends a moment to leave after it stopped on an error.
//
// RingTransport::SendToNext does not copy: queued messages read the caller's buffers
// until WaitSendsDone. A collective that stops on an error and returns lets its caller
// reuse those buffers (a step redone, a state received next), so it first waits for
// what it queued, but briefly: a broken link closes at once (the transport then reads
// nothing more), and a successor that stopped reading must not hold the ring for a whole
// --peer-timeout. What still reads after that is covered by dropping the ring
// (~TcpRing waits for its sending socket to close).
#pragma once

#include <algorithm>

#include "absl/time/time.h"
#include "net/ring_transport.h"

namespace rt::net {

// The longest a collective that stopped on an error waits for its queued sends.
inline constexpr absl::Duration kSendsAfterErrorWait = absl::Seconds(1);

// Waits up to min(`timeout`, kSendsAfterErrorWait) for `ring`'s queued sends; the
// result is not the caller's (it already has the error it stopped on).
inline void DrainSendsAfterError(RingTransport* ring, absl::Duration timeout) {
  (void)ring->WaitSendsDone(std::min(timeout, kSendsAfterErrorWait));
}

}  // namespace rt::net
