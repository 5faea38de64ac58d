// Small pieces every `ringtrain bench <kind>` shares: a barrier over the ring that
// counts its peers, and the process's peak resident memory.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "net/ring_transport.h"

namespace rt::cli {

// Every peer of `ring` reaches this point before any leaves: an allreduce of 1 per
// peer, checked against the ring's size. Used so that a peer exiting first does not
// make the others' last frames look like a failure.
absl::Status BenchBarrier(net::RingTransport* ring, absl::Duration timeout);

// Peak resident set size of this process so far, in MB (MiB).
double PeakRssMb();

}  // namespace rt::cli
