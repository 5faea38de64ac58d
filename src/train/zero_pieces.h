// ZeRO-1 pieces: who updates, and who keeps a second copy of, which floats of the
// flat buffer (--zero 1; train/ring_gradient_reducer.h).
//
// The cut. Gradients are reduced bucket by bucket (collective/bucketed_reducer.h),
// and a reduce-scatter of a bucket leaves the complete sum of one segment of it at
// each ring position (collective::OwnedRange). So the pieces of a ring of N are,
// for every bucket, its N segments; position p owns one per bucket and keeps the
// replica of position p-1's (its ring predecessor), so one lost peer loses no
// optimizer state. The cut depends on (length, bucket bytes, N) only; owners on
// ring positions. When the ring changes, every member's new pieces are filled from
// whoever holds them (train/trainer_zero.cc, collective/piece_exchange.h).
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

}  // namespace rt::train
