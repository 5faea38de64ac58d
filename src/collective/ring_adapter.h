// ProbeAndReorder: one call for the step boundary (issue 5, items 3 and 4): probe all
// links of the current ring's members, compute the ring order from the shared matrix,
// and re-form the ring in that order when it is worth it.
//
// Every peer of `current` calls it at the same step with the same `probe_index`
// (0 at start, then 1, 2, ... every --probe-every steps) and equal options; no
// collective may be running on `current`. Channels derive from probe_index, so each
// probe and each re-formed ring gets links of its own (ProbeChannel, ReorderChannel).
//
// Hysteresis: the ring is re-formed only if the new order's bottleneck beats the
// current order's bottleneck (both from the new matrix) by more than `min_gain`
// (relative), or the current order is not the computed one and its bottleneck is 0.
// All peers hold the same matrix, so they all decide the same way.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/link_matrix.h"
#include "collective/link_probe.h"
#include "net/tcp_ring.h"

namespace rt::collective {

inline uint64_t ProbeChannel(uint64_t probe_index) { return kProbeChannelBase + probe_index; }
// "ORDR" in the high half: its top byte (0x4F) differs from those of the cluster's
// ring (0x52), control (0x4C) and state (0x54) channels and of probe channels.
inline uint64_t ReorderChannel(uint64_t probe_index) {
  return 0x4F524452'00000000ull ^ probe_index;
}

struct ReorderOptions {
  ProbeOptions probe;      // peers and channel are filled in from the ring and probe_index
  double min_gain = 0.10;  // re-form only for a bottleneck gain above 10%
  absl::Duration form_wait = absl::Seconds(60);  // to re-form the ring
};

struct ReorderResult {
  LinkMatrix matrix;                   // identical on every peer
  RingPlan plan;                       // the computed order (logged by ProbeAndReorder)
  std::unique_ptr<net::TcpRing> ring;  // the re-formed ring, or null: keep `current`
  RingLinkSummary links;               // bottleneck / max RTT of the ring to use from now
  ProbeStats probe_stats;
};

absl::StatusOr<ReorderResult> ProbeAndReorder(net::TcpRing& current, uint64_t probe_index,
                                              const ReorderOptions& options);

}  // namespace rt::collective
