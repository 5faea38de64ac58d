// Ring order from measured links: a pure function, so every peer that has the same
// matrices computes the same ring.
//
// Objective, in priority order: (1) maximize the bottleneck, the smallest bandwidth
// of the N directed links order[i] -> order[(i+1) % N]; (2) fewest links running at
// exactly the bottleneck bandwidth (a ring crossing a slow shared pipe 4 times ties
// on the bottleneck with one crossing it twice, but shares the pipe twice as much);
// (3) minimize the total RTT of the links. Exact for N <= 8 (all (N-1)! orders with
// peer 0 first); above, a bounded search for a Hamiltonian cycle over the fastest
// links and greedy tours, each improved by 2-opt and node-move local search.
// Ties are broken by the lexicographically smallest order, so the result is
// deterministic. The result always starts with peer 0.
//
// Measured matrices are noisy: two links of the same kind never measure exactly
// equal, so (2) would rarely apply. BandwidthClasses() snaps every bandwidth to the
// smallest value of its class (classes at most a factor `ratio` wide);
// PlanRingOrder (link_matrix.h) orders on the classes, so its bottleneck is within
// that factor of the best possible one.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace rt::collective {

struct RingOrder {
  std::vector<int> order;     // order[i] = peer (hosts-file rank) at ring position i
  double bottleneck_bps = 0;  // min bandwidth along the ring (bytes/s); 0 for N == 1
  int bottleneck_links = 0;   // links whose bandwidth equals bottleneck_bps (0 for N == 1)
  double total_rtt_s = 0;     // sum of link RTTs along the ring (s)
};

// Objective (1)-(3) above: a strictly better than b (order ignored).
bool RingOrderBetter(const RingOrder& a, const RingOrder& b);

// Bandwidth classes of a matrix (diagonal kept as is): sort the distinct
// off-diagonal values ascending; a value more than `ratio` times the smallest value
// of the current class starts a new class (0 is a class of its own); every value is
// replaced by its class's smallest. ratio > 1. With the default 2, 1 Gbit/s and
// 100 Mbit/s links never share a class, while probe noise (links sharing a pipe
// measured concurrently) mostly stays within one.
std::vector<std::vector<double>> BandwidthClasses(
    const std::vector<std::vector<double>>& bandwidth_bps, double ratio = 2.0);

inline constexpr int kRingOrderExactMaxPeers = 8;

// bandwidth_bps[i][j]: measured bytes/s from i to j; rtt_s[i][j]: round trip (s).
// Both N x N, N >= 1, finite and non-negative off the diagonal (diagonal ignored).
absl::StatusOr<RingOrder> ComputeRingOrder(const std::vector<std::vector<double>>& bandwidth_bps,
                                           const std::vector<std::vector<double>>& rtt_s);

// The exact search regardless of N (for tests; (N-1)! orders).
absl::StatusOr<RingOrder> ComputeRingOrderExact(
    const std::vector<std::vector<double>>& bandwidth_bps,
    const std::vector<std::vector<double>>& rtt_s);

// Bottleneck and total RTT of a given order (a permutation of 0..N-1).
RingOrder EvaluateRingOrder(const std::vector<std::vector<double>>& bandwidth_bps,
                            const std::vector<std::vector<double>>& rtt_s,
                            const std::vector<int>& order);

}  // namespace rt::collective
