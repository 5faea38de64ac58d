// Fuzzes the piece-exchange descriptor decoder (collective/piece_exchange_plan.h): the
// bytes every member of a ZeRO-1 ring sends before optimizer state moves. A decoded
// descriptor must re-encode to the same bytes and pass the range checks; a ring of it
// and two variants (one needing all, one holding all) must plan without crashing, and
// every planned transfer must stay inside the buffer and send only what its sender holds.
#include <cstdint>
#include <vector>

#include "collective/piece_exchange_plan.h"
#include "fuzz_check.h"

namespace {

// Whether the held ranges (sorted, disjoint, maybe adjacent) cover all of r.
bool Holds(const rt::collective::PieceDescriptor& d, rt::collective::FloatRange r) {
  size_t at = r.first;
  for (const auto& h : d.held) {
    if (h.first <= at && at < h.second) at = h.second;
    if (at >= r.second) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rt::collective::PieceDescriptor;
  const absl::Span<const uint8_t> in(data, size);
  absl::StatusOr<PieceDescriptor> d = rt::collective::DecodePieceDescriptor(in);
  if (!d.ok()) {
    rt::fuzz::CheckErrorCode(d.status(), {absl::StatusCode::kDataLoss});
    return 0;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(rt::collective::EncodePieceDescriptor(*d), in));
  FUZZ_CHECK(rt::collective::CheckPieceRanges(d->held, d->length, "held").ok());
  FUZZ_CHECK(rt::collective::CheckPieceRanges(d->needed, d->length, "needed").ok());
  // Planning costs time in the number of ranges, not in the length: keep rings small.
  if (d->held.size() + d->needed.size() > 4096) return 0;
  PieceDescriptor needs_all = *d, holds_all = *d;
  needs_all.held.clear();
  needs_all.needed = {{0, d->length}};
  holds_all.held = {{0, d->length}};
  holds_all.needed.clear();
  const std::vector<PieceDescriptor> ring = {*d, needs_all, holds_all};
  const rt::collective::PiecePlan plan = rt::collective::PlanPieceExchange(ring);
  for (const rt::collective::PieceTransfer& t : plan.transfers) {
    FUZZ_CHECK(t.range.first < t.range.second && t.range.second <= d->length);
    FUZZ_CHECK(t.sender >= 0 && t.sender < 3);
    FUZZ_CHECK(Holds(ring[static_cast<size_t>(t.sender)], t.range));
    FUZZ_CHECK(!t.receivers.empty() && t.hops >= 1 && t.hops <= 2);
  }
  FUZZ_CHECK(plan.lost.empty());  // holds_all holds everything
  return 0;
}
