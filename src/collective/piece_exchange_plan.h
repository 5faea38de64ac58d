// The plan of a piece exchange (collective/piece_exchange.h): each member's
// descriptor (what it holds, what it needs), its wire encoding, and the transfers
// every member derives from all descriptors. Pure functions, no network.
//
// The plan. [0, length) is cut at every endpoint of every member's ranges into
// elementary intervals; each lies wholly inside or wholly outside any range. For an
// interval, its receivers are the members that need it and do not hold it; each
// receiver takes it from its NEAREST UPSTREAM HOLDER (the holder h with the fewest
// hops h -> h+1 -> ... -> receiver). Why: the link into a receiver must carry the
// interval, and so must every link back to the first holder upstream; this rule uses
// exactly those links, so every link carries each float at most once and the bytes
// on the wire are the fewest any plan over the ring can send. All receivers served
// by one holder (those between it and the next holder downstream) get the floats in
// one pass that stops at the farthest of them; members on the way that do not need
// them only forward. With ZeRO's replicas (position p keeps p-1's pieces) the owner
// or its replica holder is usually one hop upstream. An interval someone needs and
// nobody holds is lost.
//
// Adjacent intervals with the same sender and the same receivers form one transfer
// (the cut makes many small intervals). Transfers are ordered by their first
// interval, then by sender position: every member computes the same list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::collective {

using FloatRange = std::pair<size_t, size_t>;  // [begin, end) floats of the flat buffer

// Bounds every member checks of its own figures and of every descriptor.
inline constexpr int kMaxPieceBuffers = 256;
inline constexpr size_t kMaxPieceChunkFloats = size_t{1} << 24;  // 64 MiB messages

// One member's side of an exchange. Ranges: sorted, disjoint, within [0, length).
struct PieceDescriptor {
  uint64_t length = 0;        // floats of each flat buffer
  int32_t buffers = 0;        // parallel buffers every range applies to
  uint64_t chunk_floats = 0;  // floats per message: every member must use the same
  std::vector<FloatRange> held;
  std::vector<FloatRange> needed;
};

// OK if every range has begin <= end <= length and begins at or after the end of the
// one before (sorted, disjoint; empty ranges are allowed and mean nothing).
// InvalidArgument naming `what` ("held", "needed") and the first offending range.
absl::Status CheckPieceRanges(const std::vector<FloatRange>& ranges, uint64_t length,
                              const char* what);

// Wire format, little-endian: u32 magic "PXD1", u64 length, i32 buffers,
// u64 chunk_floats, u32 held count, held (u64 begin, u64 end)..., u32 needed count,
// needed (u64 begin, u64 end)... Decode refuses (DataLoss) truncation, trailing bytes,
// counts the bytes cannot hold, figures out of bounds and unsorted or overlapping
// ranges: a descriptor is another peer's bytes.
std::vector<uint8_t> EncodePieceDescriptor(const PieceDescriptor& d);
absl::StatusOr<PieceDescriptor> DecodePieceDescriptor(absl::Span<const uint8_t> bytes);

// One pass of [range) floats (of every buffer) around the ring from `sender`.
struct PieceTransfer {
  FloatRange range;
  int sender = 0;              // ring position of the holder it starts at
  std::vector<int> receivers;  // ring positions that write it, in ring order from sender
  int hops = 0;                // links it crosses: ring distance sender -> receivers.back()
};

struct PiecePlan {
  std::vector<PieceTransfer> transfers;
  std::vector<FloatRange> lost;  // needed by someone, held by nobody; sorted, merged
};

// members[p] is ring position p's descriptor; all have the same length and valid
// ranges (checked before). Deterministic: the same inputs give the same plan.
PiecePlan PlanPieceExchange(const std::vector<PieceDescriptor>& members);

}  // namespace rt::collective
