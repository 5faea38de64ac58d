// Small collectives for metadata: allgather of byte strings (e.g. parameter hashes,
// encoded sparse gradients) and exact sums of a few uint64 / double values (token
// counts, loss sums).
//
// All are ring allgathers: N-1 steps, each peer forwards what it received. Sums are
// then computed by every peer in rank order 0..N-1 from the same inputs, so every
// peer gets identical bits (DESIGN invariant 2). Every peer must call the same
// collective in the same order; a peer whose message length disagrees (e.g. a
// different count of values) produces an error naming it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "net/ring_transport.h"

namespace rt::collective {

// result[p] is peer p's `mine` (ring rank p); result[ring->rank()] == mine.
// `timeout` bounds each receive and the final wait for sends.
absl::StatusOr<std::vector<std::vector<uint8_t>>> AllgatherBytes(
    net::RingTransport* ring, absl::Span<const uint8_t> mine,
    absl::Duration timeout = absl::Seconds(120));

// values[i] becomes the sum over peers of values[i] (wraps modulo 2^64).
absl::Status AllreduceSumU64(net::RingTransport* ring, absl::Span<uint64_t> values,
                             absl::Duration timeout = absl::Seconds(120));

// values[i] becomes sum over peers, added in rank order 0..N-1 (identical everywhere).
absl::Status AllreduceSumF64(net::RingTransport* ring, absl::Span<double> values,
                             absl::Duration timeout = absl::Seconds(120));

}  // namespace rt::collective
