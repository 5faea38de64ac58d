// Sparse exchange: every peer's encoded top-k contribution travels around the ring
// (allgather), then every peer decodes all N and sums them in rank order 0..N-1
// into a zeroed bucket. Same inputs and same order on every peer, so replicas stay
// bit-identical (DESIGN invariant 2). Each peer sends (N-1) messages: the cost
// grows with N times the density, unlike the dense ring (see SparsePays).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "net/ring_transport.h"

namespace rt::collective {

// bucket (length floats, < 2^32) is overwritten with the sum of all peers' decoded
// contributions. mine: this peer's EncodeSparse output for this bucket.
// *bytes_sent (optional) is increased by what this peer sent.
absl::Status SparseAllgatherSum(net::RingTransport* ring, absl::Span<const uint8_t> mine,
                                absl::Span<float> bucket, absl::Duration timeout,
                                uint64_t* bytes_sent = nullptr);

// Whether a sparse allgather at `density` is expected to send fewer bytes than a
// dense fp32 ring allreduce with n_peers: (N-1)*k*~4 bytes < 2(N-1)/N*n*4 bytes,
// i.e. n_peers * density < 2. Depends only on (N, density): all peers agree.
bool SparsePays(int n_peers, double density);

}  // namespace rt::collective
