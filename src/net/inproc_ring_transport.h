// An in-process RingTransport: n transports joined by in-memory queues, for tests
// and benchmarks of collectives without sockets.
//
// Same contract as the TCP transport (src/net/ring_transport.h): messages to the
// successor are delivered reliably and in order; SendToNext copies the bytes and
// returns at once (so WaitSendsDone only reports errors); RecvFromPrev blocks until
// a message arrives or `timeout` passes (DeadlineExceeded naming the peer). When a
// transport is destroyed (a "dead peer"), its successor's pending and later
// RecvFromPrev calls fail with Unavailable once the queued messages are drained, and
// its predecessor's SendToNext fails with Unavailable.
//
// Zero-copy mode (options.zero_copy) models the buffer-lifetime contract strictly:
// SendToNext only records the span, the receiver copies it when it takes the
// message, and WaitSendsDone blocks until the successor has taken every message
// sent so far. A collective that changes bytes before WaitSendsDone shows up as a
// wrong result (and as a data race under ThreadSanitizer).
//
// Destinations posted with PostRecvsInto are written by the SENDER's thread inside
// SendToNext, the earliest moment any transport could write them: a collective that
// still uses such a destination after its message may have been sent shows up as a
// wrong result (and as a data race under ThreadSanitizer).
//
// Thread safety: each returned transport is used by one thread at a time (as the
// interface requires); different transports may be used from different threads.
#pragma once

#include <memory>
#include <vector>

#include "net/ring_transport.h"

namespace rt::net {

struct InProcessRingOptions {
  bool zero_copy = false;  // see above
};

// Returns n >= 1 connected transports; element i has rank() == i and size() == n.
std::vector<std::unique_ptr<RingTransport>> MakeInProcessRing(
    int n, const InProcessRingOptions& options = {});

}  // namespace rt::net
