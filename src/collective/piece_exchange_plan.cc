// Piece descriptors on the wire and the transfer plan built from them.
#include "collective/piece_exchange_plan.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/byte_codec.h"

namespace rt::collective {
namespace {

constexpr uint32_t kDescriptorMagic = 0x31445850;  // "PXD1", little-endian
constexpr size_t kRangeBytes = 2 * sizeof(uint64_t);

void WriteRanges(ByteWriter* w, const std::vector<FloatRange>& ranges) {
  w->Int<uint32_t>(static_cast<uint32_t>(ranges.size()));
  for (const FloatRange& r : ranges) {
    w->Int<uint64_t>(r.first);
    w->Int<uint64_t>(r.second);
  }
}

// Reads a count and that many ranges, refusing a count the remaining bytes cannot
// hold before anything is allocated for it.
std::vector<FloatRange> ReadRanges(ByteReader* r, size_t bytes_left, const char* what) {
  const uint32_t count = r->Int<uint32_t>(what);
  std::vector<FloatRange> ranges;
  if (!r->ok()) return ranges;
  if (count > bytes_left / kRangeBytes) {
    r->Fail(absl::StrFormat("%s: %d ranges in %d bytes", what, count, bytes_left));
    return ranges;
  }
  ranges.reserve(count);
  for (uint32_t i = 0; i < count && r->ok(); ++i) {
    const uint64_t begin = r->Int<uint64_t>(what);
    const uint64_t end = r->Int<uint64_t>(what);
    ranges.emplace_back(begin, end);
  }
  return ranges;
}

// Whether the interval starting at cut point x lies in `ranges`; *i is a cursor that
// only moves forward (x grows from call to call). Every endpoint is a cut point, so
// an interval is inside a range iff its first float is.
bool Covers(const std::vector<FloatRange>& ranges, size_t* i, size_t x) {
  while (*i < ranges.size() && ranges[*i].second <= x) ++*i;
  return *i < ranges.size() && ranges[*i].first <= x;
}

void AppendMerged(std::vector<FloatRange>* ranges, FloatRange r) {
  if (!ranges->empty() && ranges->back().second == r.first) {
    ranges->back().second = r.second;
  } else {
    ranges->push_back(r);
  }
}

int Distance(int from, int to, int n) { return (to - from + n) % n; }

}  // namespace

absl::Status CheckPieceRanges(const std::vector<FloatRange>& ranges, uint64_t length,
                              const char* what) {
  uint64_t previous_end = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const uint64_t begin = ranges[i].first, end = ranges[i].second;
    if (begin > end || end > length) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s range %d [%d, %d) is not within [0, %d)", what, i, begin, end, length));
    }
    if (begin == end) continue;
    if (begin < previous_end) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s range %d [%d, %d) starts before the end %d of the one before (ranges must be "
          "sorted and disjoint)",
          what, i, begin, end, previous_end));
    }
    previous_end = end;
  }
  return absl::OkStatus();
}

std::vector<uint8_t> EncodePieceDescriptor(const PieceDescriptor& d) {
  std::vector<uint8_t> bytes;
  bytes.reserve(36 + kRangeBytes * (d.held.size() + d.needed.size()));
  ByteWriter w(&bytes);
  w.Int<uint32_t>(kDescriptorMagic);
  w.Int<uint64_t>(d.length);
  w.Int<int32_t>(d.buffers);
  w.Int<uint64_t>(d.chunk_floats);
  WriteRanges(&w, d.held);
  WriteRanges(&w, d.needed);
  return bytes;
}

absl::StatusOr<PieceDescriptor> DecodePieceDescriptor(absl::Span<const uint8_t> bytes) {
  ByteReader r(bytes);
  PieceDescriptor d;
  if (r.Int<uint32_t>("magic") != kDescriptorMagic && r.ok()) r.Fail("not a piece descriptor");
  d.length = r.Int<uint64_t>("length");
  d.buffers = r.Int<int32_t>("buffers");
  d.chunk_floats = r.Int<uint64_t>("chunk_floats");
  // Bytes after the first `used` ones (0 when there are fewer: the read then fails).
  auto left = [&bytes](size_t used) { return bytes.size() > used ? bytes.size() - used : 0; };
  constexpr size_t kFixedBytes = 4 + 8 + 4 + 8;
  if (r.ok()) d.held = ReadRanges(&r, left(kFixedBytes + 8), "held");  // both counts
  if (r.ok())
    d.needed = ReadRanges(&r, left(kFixedBytes + 8 + kRangeBytes * d.held.size()), "needed");
  if (r.ok() && !r.AtEnd()) r.Fail("trailing bytes");
  if (!r.ok()) return absl::DataLossError("malformed piece descriptor: " + r.error());
  if (d.length > std::numeric_limits<size_t>::max() / sizeof(float)) {
    return absl::DataLossError(absl::StrFormat("piece descriptor: length %d floats", d.length));
  }
  if (d.buffers < 1 || d.buffers > kMaxPieceBuffers) {
    return absl::DataLossError(absl::StrFormat("piece descriptor: %d buffers", d.buffers));
  }
  if (d.chunk_floats < 1 || d.chunk_floats > kMaxPieceChunkFloats) {
    return absl::DataLossError(
        absl::StrFormat("piece descriptor: %d floats per chunk", d.chunk_floats));
  }
  for (const auto& [ranges, what] : {std::pair{&d.held, "held"}, std::pair{&d.needed, "needed"}}) {
    absl::Status st = CheckPieceRanges(*ranges, d.length, what);
    if (!st.ok()) return absl::DataLossError("piece descriptor: " + std::string(st.message()));
  }
  return d;
}

PiecePlan PlanPieceExchange(const std::vector<PieceDescriptor>& members) {
  PiecePlan plan;
  const int n = static_cast<int>(members.size());
  if (n == 0) return plan;
  const size_t length = members[0].length;
  std::vector<size_t> cuts = {0, length};
  for (const PieceDescriptor& m : members) {
    for (const auto* ranges : {&m.held, &m.needed}) {
      for (const FloatRange& r : *ranges) {
        cuts.push_back(r.first);
        cuts.push_back(r.second);
      }
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  std::vector<size_t> held_at(n, 0), needed_at(n, 0);  // per member: range cursors
  std::vector<char> holds(n), receives(n);
  std::vector<int> open(n, -1);             // per sender: its transfer that may grow, or -1
  std::vector<std::vector<int>> served(n);  // per sender: receivers of this interval
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const size_t x = cuts[c], y = cuts[c + 1];
    bool any_holder = false, any_receiver = false;
    for (int p = 0; p < n; ++p) {
      holds[p] = Covers(members[p].held, &held_at[p], x);
      receives[p] = !holds[p] && Covers(members[p].needed, &needed_at[p], x);
      any_holder = any_holder || holds[p];
      any_receiver = any_receiver || receives[p];
    }
    if (!any_receiver) continue;
    if (!any_holder) {
      AppendMerged(&plan.lost, {x, y});
      continue;
    }
    for (auto& s : served) s.clear();
    // Walking the ring once from a holder, each receiver's nearest upstream holder
    // is the last holder passed.
    int start = 0;
    while (!holds[start]) ++start;
    int sender = start;
    for (int d = 1; d < n; ++d) {
      const int p = (start + d) % n;
      if (holds[p]) sender = p;
      if (receives[p]) served[sender].push_back(p);
    }
    for (int s = 0; s < n; ++s) {
      // A holder's receivers follow it in the walk: they are in ring order from it.
      const std::vector<int>& rs = served[s];
      if (rs.empty()) continue;
      if (open[s] >= 0) {
        PieceTransfer& t = plan.transfers[open[s]];
        if (t.range.second == x && t.receivers == rs) {
          t.range.second = y;
          continue;
        }
      }
      open[s] = static_cast<int>(plan.transfers.size());
      plan.transfers.push_back({{x, y}, s, rs, Distance(s, rs.back(), n)});
    }
  }
  return plan;
}

}  // namespace rt::collective
