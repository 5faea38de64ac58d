// Ring allreduce with block-scaled int8 or int4 messages (collective/block_quant.h), for
// round sync's outer exchange (--outer-compress int8|int4).
//
// The ring of RingAllreduce (ring_allreduce.h), message for message: segment s starts
// at peer s and its partial sum travels s -> s+1 -> ..., each hop adding its own
// contribution; the peer that completes segment s+1... (its sum) quantises it once,
// and those bytes go around the ring unchanged in the allgather. Every peer, the
// quantising one included, decodes the same bytes: identical results everywhere
// (DESIGN invariant 2). Each peer quantises what it sends (its own contribution, a
// partial sum it forwards, or the final sum it completed) and keeps the quantisation
// error in `residual` at those positions, as the bf16 wire does, so the sum of all
// peers' residuals plus the result equals the sum of the inputs up to fp32 rounding.
// Wire bytes per peer: 2(N-1)/N x n x (1.0625 int8 | 0.5625 int4), a quarter (an
// eighth) of fp32's, in messages of at most `chunk_values` values.
//
// Simpler than RingAllreduce: a segment's chunks are sent and received one after the
// other (no look-ahead, no in-place receives), which is enough for an exchange that
// happens once per round.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "net/ring_transport.h"

namespace rt::collective {

struct QuantizedAllreduceOptions {
  int bits = 8;                                 // 8 or 4
  size_t chunk_values = size_t{1} << 20;        // values per message
  absl::Duration timeout = absl::Seconds(120);  // per receive / for the sends at the end
};

// data: this peer's contribution; afterwards the (dequantised) sum over all peers,
// identical on every peer. residual: empty, or data.size() floats, overwritten with this
// peer's quantisation errors (zeros alone, where data is left as it is). *bytes_sent
// (optional) grows by what this peer sent.
absl::Status QuantizedRingAllreduce(net::RingTransport* ring, absl::Span<float> data,
                                    absl::Span<float> residual,
                                    const QuantizedAllreduceOptions& options,
                                    uint64_t* bytes_sent = nullptr);

}  // namespace rt::collective
