// ZeRO-1 pieces: who updates, and who keeps a second copy of, which floats of the
// flat buffer (--zero 1; train/ring_gradient_reducer.h), and what has to move when
// the ring changes.
//
// The cut. Gradients are reduced bucket by bucket (collective/bucketed_reducer.h),
// and a reduce-scatter of a bucket leaves the complete sum of one segment of it at
// each ring position (collective::OwnedRange). So the pieces of a ring of N are,
// for every bucket, its N segments; position p owns one per bucket and keeps the
// replica of position p-1's (its ring predecessor), so one lost peer loses no
// optimizer state. The cut depends on (length, bucket bytes, N) only; owners on
// ring positions.
//
// Moves. When the ring changes (a peer died, left, joined, or the order changed),
// every member's new pieces and new replica pieces must be filled from a member of
// the old ring that holds them, as owner or as replica holder. PlanPieceMoves says,
// for every member of the new ring, which old member to take each part from:
// itself where it already holds the floats (nothing travels), the old owner
// otherwise, its replica holder when the owner is gone. Floats whose owner and
// replica holder are both gone (two ring neighbours lost at once) cannot be
// recovered: the plan says so, and the ring resumes from a checkpoint.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace rt::train {

using FloatRange = std::pair<size_t, size_t>;  // [begin, end) floats of the flat buffer

struct ZeroPiece {
  size_t begin, end;
  int owner;  // ring position
};

// Every bucket's segments for a ring of `peers`, in buffer order.
std::vector<ZeroPiece> ZeroPieces(size_t length, size_t bucket_bytes, int peers);
// The ranges position `position` owns / keeps the replica of (its predecessor's;
// none when alone), sorted, adjacent ones merged.
std::vector<FloatRange> OwnedPieces(size_t length, size_t bucket_bytes, int peers, int position);
std::vector<FloatRange> ReplicaPieces(size_t length, size_t bucket_bytes, int peers, int position);

// A ring of members: ids (e.g. hosts-file ranks) in position order.
struct ZeroRing {
  std::vector<int> order;
  size_t bucket_bytes = 0;
};

// One part of a member's new state and where it comes from.
struct PieceMove {
  FloatRange range;
  int from = -1;              // id of an old member holding it (may be the receiver)
  bool from_replica = false;  // `from` holds it as replica (its owner is gone)
  bool replica_slot = false;  // it fills the receiver's replica, not its own pieces
};

struct PieceMovePlan {
  // Per member of the new ring, in its position order: the moves that fill its new
  // owned and replica pieces, ordered by range within each kind.
  std::vector<std::vector<PieceMove>> moves;
  // Ranges no surviving member holds (owner and replica holder both gone), sorted.
  std::vector<FloatRange> lost;
};

// `old_ring` and `new_ring` cut the same `length`. `survivors`: the ids that still
// hold what they held in the old ring (members of both rings that did not restart);
// everyone else (joiners, a peer that died and came back) holds nothing.
// Deterministic: every member computes the same plan from the same inputs.
PieceMovePlan PlanPieceMoves(size_t length, const ZeroRing& old_ring, const ZeroRing& new_ring,
                             const std::vector<int>& survivors);

// "members 3,5 hold nothing of [a, b) ..." style summary of `lost` for a log line.
std::string DescribeLost(const std::vector<FloatRange>& lost, size_t length);

}  // namespace rt::train
