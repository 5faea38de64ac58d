// ExchangePieces: moves ranges of flat float buffers around a ring, from the members
// that hold them to the members that need them. For ZeRO-1 (--zero 1) after a ring
// change (each member's new pieces and replicas filled from whoever kept them) and
// for a checkpoint writer that needs every piece; it knows ranges, not optimizers.
//
// Protocol. (1) An allgather of every member's descriptor (length, buffers,
// chunk_floats, held and needed ranges; collective/piece_exchange_plan.h). (2) Every
// member computes the same plan from the same descriptors: each needed float nobody
// local has comes from its nearest upstream holder, in one pass per (sender,
// receivers) run that stops at the farthest receiver; floats needed and held by
// nobody are lost. (3) The transfers in plan order, each for buffer 0, 1, ..., each
// cut into messages of chunk_floats; a member on the way receives a message (of
// exactly the expected size), passes it on unless it is the last, and writes the
// floats if it needs them. Every member walks the same list, so all agree on which
// message comes next. A member's own needed floats that it holds are copied
// read -> write first, without the network.
//
// Memory: a few chunk-sized staging buffers per member, whatever the length.
// Errors: a bad argument of the caller is InvalidArgument before any traffic; a
// malformed descriptor (DataLoss) or one whose length, buffers or chunk_floats differ
// (FailedPrecondition) is refused on every member, naming that member; a transport
// error or timeout ends the exchange on this member with that error (the caller
// gives up the ring, which makes the others fail too). After an error the buffers of
// `write` may be partly written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collective/piece_exchange_plan.h"
#include "net/ring_transport.h"

namespace rt::collective {

struct PieceExchangeOptions {
  absl::Duration timeout = absl::Seconds(120);  // per receive / per wait for sends
  // Floats per message, 1..kMaxPieceChunkFloats; every member must use the same.
  size_t chunk_floats = size_t{1} << 20;
};

struct PieceExchangeResult {
  std::vector<FloatRange> lost;        // needed by someone, held by nobody (same on every member)
  uint64_t bytes_sent = 0;             // float payload this member sent (its own and forwarded)
  uint64_t descriptor_bytes_sent = 0;  // what step (1) sent
  uint64_t floats_received = 0;        // from the predecessor, written or only forwarded
  uint64_t floats_written = 0;         // passed to `write` (local copies included), all buffers
};

// Reads `range` (inside ONE held range) of buffer `buffer`: returns exactly its
// range.second - range.first floats, valid until read or write is called again.
using PieceReader = std::function<absl::Span<const float>(int buffer, FloatRange range)>;
// Stores floats of buffer `buffer` at [offset, offset + floats.size()), inside ONE
// needed range. `floats` is valid only during the call.
using PieceWriter = std::function<void(int buffer, size_t offset, absl::Span<const float> floats)>;

// Every member of the ring calls it at the same point, with what it holds and what it
// needs: sorted, disjoint ranges within [0, length) (empty ones are ignored), applying
// to each of `buffers` parallel buffers (1..kMaxPieceBuffers; e.g. 2: AdamW's m and
// v). Afterwards every needed float that someone held has been written once with the
// holder's value, and nothing outside the needed ranges; `lost` lists the rest.
// read/write are called on this thread only; a float both needed and held here is
// copied with read -> write (so write must not change what read returns).
absl::StatusOr<PieceExchangeResult> ExchangePieces(net::RingTransport* ring, size_t length,
                                                   int buffers, const std::vector<FloatRange>& held,
                                                   const std::vector<FloatRange>& needed,
                                                   const PieceReader& read,
                                                   const PieceWriter& write,
                                                   const PieceExchangeOptions& options = {});

}  // namespace rt::collective
