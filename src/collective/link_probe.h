// Link probing: every peer measures round-trip time and bandwidth to
// every other peer over direct links, then all peers share the full matrix.
//
// Schedule: a round-robin tournament (circle method). In each round the peers form
// disjoint pairs, so no peer probes two links at once; N-1 rounds for even N, N for
// odd N (one peer sits out each round). Within a pair the lower hosts-file rank dials
// (TcpNode::ConnectTo on `channel`), the other accepts. Rounds need no global barrier:
// a pair starts timing only after the acceptor says "go", i.e. when both are free.
//
// Per pair (all messages are data frames on the pair's own link):
//   1. acceptor sends GO (with its matrix digest, see "Reuse"), the dialer its digest;
//   2. RTT: the dialer sends `pings` + 1 pings of `ping_bytes` and times the echoes
//      (first one untimed); RTT = minimum (the median may include queueing behind
//      other pairs' streams on a shared pipe); the dialer tells the acceptor;
//   3. bandwidth, each direction in turn, driven by the receiver: it requests a
//      warm-up stream of `warmup_bytes`, then streams sized from the last rate so that
//      their second half, the timed part, lasts about `stream_time`, or 8 RTT if that
//      is longer (delayed links; at most 4x the one before, within [min_stream_bytes,
//      max_stream_bytes], the upper bound lifted to 256 MB for the RTT) until one is steady (its
//      last half as fast as its last three quarters, within 15%: no token-bucket burst
//      ran out late inside it) with a second half of at least 3/4 stream_time, or
//      reaches max_stream_bytes (at most 8 per direction, then the median of the last
//      three); the rate of that stream's last three quarters (read from the arrival
//      times of its chunks, 64 per stream: the upper hull of bytes over time, robust to
//      the RTT-long holes that lost packets leave, stream_rate.h) is reported
//      to the sender. So a pair costs a few stream_time plus a few RTT
//      on any link speed, shaped by a token bucket or not, and the whole probe about
//      rounds * that;
//   4. the acceptor acknowledges and both close the pair's link.
// Then each peer contributes its row (its outgoing bandwidths and RTTs) to an
// allgather over `ring`, and every peer assembles the same bytes into the matrix.
//
// Reuse (ProbeOptions::known): a ring whose membership changed would probe every
// link again, ~20 s per probe on internet-like links (streams of >= 16 RTT per
// direction and pair), and a rejoin pays it twice (the survivors' view, then the
// view with the returning peer). Given the last matrix this peer shared, each pair
// starts by exchanging a digest of it (the acceptor's in GO, the dialer's in its
// answer); a pair whose two peers hold the same matrix (equal digests: every member
// of a probe holds the same bytes) is not measured again, its figures are taken from
// that matrix and the pair's link closes after those two messages (a few round trips
// instead of the streams). Only pairs with a peer that holds another matrix or none (a
// restarted process, a new host, a peer that missed a probe) are measured. The
// tournament keeps its rounds, so a joining peer still measures its N - 1 links one
// after the other; the survivors of a departure measure nothing. What goes stale: a reused
// figure is as old as the probe that measured it, so a link whose speed changed since
// (cross traffic, a provider's throttling) keeps its old figure until a probe without
// `known` (--probe-every) measures every link again.
//
// Every peer in `peers` must call ProbeLinks with equal options at the same point of
// its run (e.g. a step boundary), while no collective is running on `ring`. Failures
// (a peer that does not come, a broken link, a malformed message) return an error that
// names the peer; nothing hangs beyond `timeout` per wait.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/abort_signal.h"
#include "collective/link_matrix.h"
#include "net/ring_transport.h"
#include "net/tcp_node.h"

namespace rt::collective {

// Link channels at and above this are for probes (rings use small channel numbers).
inline constexpr uint64_t kProbeChannelBase = uint64_t{1} << 48;

struct ProbeOptions {
  std::vector<int> peers;  // hosts-file ranks taking part (= the ring's members); empty = all
  uint64_t channel = kProbeChannelBase;  // same on every peer, a new one for every probe
  int pings = 8;                         // timed ping-pongs per pair
  size_t ping_bytes = 64;
  size_t warmup_bytes = size_t{256} << 10;
  size_t min_stream_bytes = size_t{256} << 10;
  size_t max_stream_bytes = size_t{16} << 20;
  size_t max_chunk_bytes = size_t{1} << 20;             // stream frame size (at most; >= 64 chunks)
  absl::Duration stream_time = absl::Milliseconds(40);  // timed half of a stream
  absl::Duration timeout = absl::Seconds(30);           // per link setup and per receive
  AbortSignal* abort = nullptr;  // optional: Abort() makes the probe fail promptly
  // Optional: the last matrix this peer shared (see "Reuse" above); pairs of peers that
  // hold the same one are not probed again. Every peer passes its own (or none).
  const LinkMatrix* known = nullptr;
};

// Round r of the tournament for n peers: disjoint pairs (a, b), a < b, of indices
// 0..n-1. Every unordered pair appears in exactly one round.
std::vector<std::vector<std::pair<int, int>>> ProbeSchedule(int n);

struct ProbeStats {
  double seconds = 0;           // wall time of the whole probe, sharing included
  int rounds = 0;               // tournament rounds
  uint64_t bytes_streamed = 0;  // by this peer (both streams of all its pairs)
  int pairs_probed = 0;         // this peer's links measured
  int pairs_reused = 0;         // this peer's links whose figures came from `known`
};

// The digest of a matrix that decides reuse: 0 for none (no matrix, or one without
// `self_rank`), else a hash of its peers and every double's bits (never 0).
uint64_t LinkMatrixDigest(const LinkMatrix* m, int self_rank);

// Measures this peer's links (node.self_rank() must be in peers) and shares the
// matrix over `ring` (whose members are `peers`, any order). *stats is optional.
absl::StatusOr<LinkMatrix> ProbeLinks(net::TcpNode& node, net::RingTransport& ring,
                                      const ProbeOptions& options, ProbeStats* stats = nullptr);

// Shares already measured rows: mine is row `self_index` of a matrix with `peers`.
// (ProbeLinks' last step; exposed for tests and for re-sharing.)
absl::StatusOr<LinkMatrix> ShareLinkRows(net::RingTransport& ring, const LinkMatrix& mine,
                                         int self_index, absl::Duration timeout);

}  // namespace rt::collective
