// LinkMatrix: measured bandwidth and round-trip time between every pair of peers,
// The exact wire form of one row (so every peer can hold bit-identical matrices after
// an allgather), and the ring order derived from it.
//
// Peers are hosts-file ranks; the matrices are indexed by position in `peers`
// (sorted ascending), so ring_order.h, which works on 0..N-1, can use them directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collective/ring_order.h"

namespace rt::collective {

struct LinkMatrix {
  std::vector<int> peers;  // hosts-file ranks, strictly increasing
  // bandwidth_bps[i][j]: bytes/s from peers[i] to peers[j] (measured by the receiver);
  // rtt_s[i][j]: round trip in seconds (measured by the dialer of the pair, stored in
  // both directions). Diagonals are 0. Both N x N.
  std::vector<std::vector<double>> bandwidth_bps;
  std::vector<std::vector<double>> rtt_s;

  int size() const { return static_cast<int>(peers.size()); }
  int IndexOf(int host_rank) const;  // -1 if not a member
  // Bitwise equality of all doubles (what "identical on every peer" means).
  bool BitwiseEquals(const LinkMatrix& other) const;
};

// Row `index` of `m` as bytes (little-endian, doubles bit-copied):
//   "RTLR" | u32 version (1) | u32 index | u32 n | n x i32 peers | n x f64 bandwidth |
//   n x f64 rtt
std::vector<uint8_t> EncodeLinkRow(const LinkMatrix& m, int index);

// Parses a row sent by the peer at `expected_index` of `expected_peers` into m (whose
// peers and N x N shape must already be set). Validates magic, version, size, the
// peer list (all peers must agree on who takes part), and that values are finite and
// non-negative. Errors name `from` (e.g. "ring position 2").
absl::Status DecodeLinkRow(absl::Span<const uint8_t> bytes, int expected_index,
                           const std::string& from, LinkMatrix* m);

// A ring order in hosts-file ranks, chosen by ComputeRingOrder on the bandwidth
// classes of the matrix (BandwidthClasses: measurement noise must not decide; max
// bottleneck class, then fewest links in it, then min total RTT; deterministic).
struct RingPlan {
  std::vector<int> host_order;  // hosts-file ranks in ring order, starting at peers[0]
  double bottleneck_bps = 0;    // slowest measured link along the ring (bytes/s)
  double total_rtt_s = 0;
  RingOrder classed;        // the objective on the classes (order = matrix indices)
  std::string description;  // DescribeRing(...) of host_order
};
absl::StatusOr<RingPlan> PlanRingOrder(const LinkMatrix& m);

// The ring objective of `host_order` (hosts-file ranks, all members of m) on the
// bandwidth classes of m: what PlanRingOrder optimises, to compare another order.
RingOrder ClassedRingOrder(const LinkMatrix& m, const std::vector<int>& host_order);

// "ring order 0 -> 2 -> 1 -> 3 -> 0: 118 MB/s, 940 MB/s, 931 MB/s, 120 MB/s;
//  bottleneck 118 MB/s, rtt sum 0.21 ms" for hosts-file ranks `host_order`
// (each link's speed in the ring's send direction; MB = 10^6 bytes).
std::string DescribeRing(const LinkMatrix& m, const std::vector<int>& host_order);

// One line per peer of the matrix, its outgoing links in hosts-file ranks:
// "links from 2: ->0 118 MB/s 0.210 ms, ->1 11 MB/s 0.380 ms, ..."
std::vector<std::string> DescribeLinkMatrix(const LinkMatrix& m);

// Bottleneck (bytes/s) and the largest RTT (s) of the ring `host_order`: what the
// codec planner needs to predict a ring collective's time.
struct RingLinkSummary {
  double bottleneck_bps = 0;
  double max_rtt_s = 0;
};
RingLinkSummary SummarizeRing(const LinkMatrix& m, const std::vector<int>& host_order);

}  // namespace rt::collective
