// ProbeAndReorder: one call for the step boundary: probe all
// links of the current ring's members, compute the ring order from the shared matrix,
// and re-form the ring in that order when it is worth it.
//
// Every peer of `current` calls it at the same step with the same `probe_index`
// (0 at start, then 1, 2, ... every --probe-every steps) and equal options; no
// collective may be running on `current`. Channels derive from probe_index and
// options.salt (the cluster view's ring channel), so each probe and each re-formed
// ring gets links of its own (ProbeChannel, ReorderChannel), also across views.
//
// Hysteresis: the ring is re-formed only if the computed order is better than the
// current one by the planner's own measure (RingOrderBetter on the bandwidth classes:
// a faster bottleneck class, or as fast with fewer links in it), or its raw
// bottleneck beats the current order's by more than `min_gain` (relative), or the
// current order's bottleneck is 0. Both are judged on the new matrix; all peers hold
// the same matrix, so they all decide the same way. A smaller total RTT alone never
// re-forms the ring (probe noise).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/link_matrix.h"
#include "collective/link_probe.h"
#include "net/tcp_ring.h"

namespace rt::collective {

// Channel layout: top byte = kind, then 40 bits of a hash of `salt`, then the low 16
// bits of the probe index. Probe channels have top byte 'P' (0x50), re-formed rings
// 'O' (0x4F): both differ from the cluster's ring (0x52), control (0x4C) and state
// (0x54) channels. Different salts (cluster views) give different channels except
// for a 2^-40 hash collision; a probe index repeats only after 65536 probes.
inline uint64_t SaltBits(uint64_t salt) {
  uint64_t z = salt + 0x9E3779B97F4A7C15ull;  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z & ((uint64_t{1} << 40) - 1)) << 16;
}
inline uint64_t ProbeChannel(uint64_t probe_index, uint64_t salt = 0) {
  return (uint64_t{0x50} << 56) | SaltBits(salt) | (probe_index & 0xFFFF);
}
inline uint64_t ReorderChannel(uint64_t probe_index, uint64_t salt = 0) {
  return (uint64_t{0x4F} << 56) | SaltBits(salt) | (probe_index & 0xFFFF);
}

struct ReorderOptions {
  ProbeOptions probe;  // peers and channel are filled in from the ring and probe_index
  // Re-form also for a raw bottleneck gain above 50% within one bandwidth class
  // (smaller gains are within probe noise, e.g. on loopback under CPU load).
  double min_gain = 0.5;
  absl::Duration form_wait = absl::Seconds(60);  // to re-form the ring
  uint64_t salt = 0;                             // mixed into the probe and re-form channels
  bool reform = true;  // false: probe and plan only; result.ring stays null
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
