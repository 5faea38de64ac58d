// The link probe's rate estimator: a stream's delivery rate from the arrival times of
// its chunks, robust to the holes that lost packets leave on delayed links.
//
// On a link with loss, TCP hands the reader nothing behind a lost packet until its
// retransmission arrives, about one RTT later (at 80 ms RTT, 100 Mbit/s and 0.1% loss
// a packet is lost about every RTT), then everything held at once. So the curve of
// bytes received over time lies on or BELOW the line of what the link delivered, and
// touches it whenever no hole is pending (about 40% of the time in that example). A
// fit through all arrivals (least squares, or two end points) errs by a hole's worth of
// bytes over the window: +-25% over 4 RTT, the misses measured before this estimator.
//
// So the rate is read from the curve's UPPER concave hull: its vertices are the
// arrivals that were not held back, and its edges between them run along the
// delivered line. The hull's edges at the window's ends can be off (a window that
// starts inside a hole gives a steep first edge, a stream whose last chunk waited for
// a retransmission a shallow last edge), but they span at most about an RTT each; the
// rate is the median of the edges' slopes weighted by the time each edge spans, so
// whatever held for most of the window wins. A token-bucket burst (fast for a short
// time) likewise weighs little; a link that really slowed for most of the window reads
// slow. Reader wake-ups that arrive late only lower points under the hull.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace rt::collective {

// Rate in bytes/s of arrivals [first, end) of `arrival_ns` (nondecreasing times in ns;
// arrival i means (i - first) * chunk_bytes more bytes than at arrival `first`): the
// time-weighted median slope of the upper concave hull of those points (see above).
// Fewer than 2 points: 0. All within 0.1 us: a large finite rate (bytes / 0.1 us), as a
// burst read at once.
double EnvelopeRate(absl::Span<const int64_t> arrival_ns, size_t first, uint64_t chunk_bytes);

// What the probe reads from one stream of chunks of equal size (at least 4 arrivals):
// the rate over its last three quarters (from the arrival of the chunk before them:
// the first quarter is the ramp after the idle round trip between streams), and over
// its last half; a stream is steady when the two agree (no burst ran out inside it).
struct StreamRates {
  double window_bps = 0;  // last three quarters
  double window_s = 0;    // the time they took
  double last_half_bps = 0;
};
StreamRates ReadStreamRates(absl::Span<const int64_t> arrival_ns, uint64_t chunk_bytes);

// The median of `values` (non-empty; the mean of the middle two for an even count).
double MedianOf(std::vector<double> values);

}  // namespace rt::collective
