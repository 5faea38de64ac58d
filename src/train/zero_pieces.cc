// The ZeRO-1 piece cut and the moves of a ring change (see zero_pieces.h).
#include "train/zero_pieces.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "collective/bucketed_reducer.h"
#include "collective/ring_allreduce.h"

namespace rt::train {
namespace {

std::vector<FloatRange> PiecesOf(size_t length, size_t bucket_bytes, int peers, int position) {
  std::vector<FloatRange> ranges;
  for (const ZeroPiece& p : ZeroPieces(length, bucket_bytes, peers)) {
    if (p.owner == position && p.begin < p.end) ranges.emplace_back(p.begin, p.end);
  }
  return ranges;
}

bool Contains(const std::vector<int>& ids, int id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Appends `m`, merged into the last move when it continues it from the same source.
void AddMove(std::vector<PieceMove>* moves, const PieceMove& m) {
  if (!moves->empty()) {
    PieceMove& last = moves->back();
    if (last.range.second == m.range.first && last.from == m.from &&
        last.from_replica == m.from_replica && last.replica_slot == m.replica_slot) {
      last.range.second = m.range.second;
      return;
    }
  }
  moves->push_back(m);
}

void AddRange(std::vector<FloatRange>* ranges, FloatRange r) {
  if (!ranges->empty() && ranges->back().second == r.first) {
    ranges->back().second = r.second;
  } else {
    ranges->push_back(r);
  }
}

}  // namespace

std::vector<ZeroPiece> ZeroPieces(size_t length, size_t bucket_bytes, int peers) {
  // Buckets run from the end of the buffer (bucketed_reducer.h): walk them backwards.
  const std::vector<collective::BucketedReducer::Bucket> cut =
      collective::BucketedReducer::Cut(length, bucket_bytes);
  std::vector<ZeroPiece> pieces;
  for (size_t i = cut.size(); i-- > 0;) {
    const size_t len = cut[i].end - cut[i].begin;
    std::vector<ZeroPiece> bucket;
    for (int p = 0; p < peers; ++p) {
      const auto [b, e] = collective::OwnedRange(len, peers, p);
      bucket.push_back({cut[i].begin + b, cut[i].begin + e, p});
    }
    std::sort(bucket.begin(), bucket.end(),
              [](const ZeroPiece& x, const ZeroPiece& y) { return x.begin < y.begin; });
    pieces.insert(pieces.end(), bucket.begin(), bucket.end());
  }
  return pieces;
}

std::vector<FloatRange> OwnedPieces(size_t length, size_t bucket_bytes, int peers, int position) {
  return PiecesOf(length, bucket_bytes, peers, position);
}

std::vector<FloatRange> ReplicaPieces(size_t length, size_t bucket_bytes, int peers, int position) {
  if (peers <= 1) return {};
  return PiecesOf(length, bucket_bytes, peers, (position + peers - 1) % peers);
}

PieceMovePlan PlanPieceMoves(size_t length, const ZeroRing& old_ring, const ZeroRing& new_ring,
                             const std::vector<int>& survivors) {
  const int old_n = static_cast<int>(old_ring.order.size());
  const int new_n = static_cast<int>(new_ring.order.size());
  const std::vector<ZeroPiece> old_pieces = ZeroPieces(length, old_ring.bucket_bytes, old_n);
  PieceMovePlan plan;
  plan.moves.resize(static_cast<size_t>(new_n));
  std::vector<FloatRange> lost_parts;
  for (int q = 0; q < new_n; ++q) {
    const int me = new_ring.order[static_cast<size_t>(q)];
    for (const bool replica_slot : {false, true}) {
      const std::vector<FloatRange> need =
          replica_slot ? ReplicaPieces(length, new_ring.bucket_bytes, new_n, q)
                       : OwnedPieces(length, new_ring.bucket_bytes, new_n, q);
      // Both lists are sorted by begin; old pieces tile [0, length).
      size_t k = 0;
      for (const FloatRange& r : need) {
        while (k < old_pieces.size() && old_pieces[k].end <= r.first) ++k;
        for (size_t j = k; j < old_pieces.size() && old_pieces[j].begin < r.second; ++j) {
          const ZeroPiece& op = old_pieces[j];
          const FloatRange part{std::max(r.first, op.begin), std::min(r.second, op.end)};
          if (part.first >= part.second) continue;
          const int owner = old_ring.order[static_cast<size_t>(op.owner)];
          const int holder =
              old_n > 1 ? old_ring.order[static_cast<size_t>((op.owner + 1) % old_n)] : -1;
          const bool owner_ok = Contains(survivors, owner) && Contains(new_ring.order, owner);
          const bool holder_ok =
              holder >= 0 && Contains(survivors, holder) && Contains(new_ring.order, holder);
          PieceMove m;
          m.range = part;
          m.replica_slot = replica_slot;
          if (me == owner && owner_ok) {
            m.from = me;
          } else if (me == holder && holder_ok) {
            m.from = me, m.from_replica = true;
          } else if (owner_ok) {
            m.from = owner;
          } else if (holder_ok) {
            m.from = holder, m.from_replica = true;
          } else {
            lost_parts.push_back(part);
            continue;
          }
          AddMove(&plan.moves[static_cast<size_t>(q)], m);
        }
      }
    }
  }
  // A lost float is needed by its new owner and its new replica holder: report it once.
  std::sort(lost_parts.begin(), lost_parts.end());
  for (const FloatRange& r : lost_parts) {
    if (!plan.lost.empty() && r.first < plan.lost.back().second) {
      plan.lost.back().second = std::max(plan.lost.back().second, r.second);
    } else {
      AddRange(&plan.lost, r);
    }
  }
  return plan;
}

std::string DescribeLost(const std::vector<FloatRange>& lost, size_t length) {
  size_t floats = 0;
  for (const FloatRange& r : lost) floats += r.second - r.first;
  if (lost.empty()) return "no optimizer state is lost";
  return absl::StrFormat(
      "%d of %d floats of optimizer state (%.1f%%, %d ranges from [%d, %d)) had their owner "
      "and its replica holder both leave",
      floats, length, 100.0 * static_cast<double>(floats) / static_cast<double>(length),
      lost.size(), lost.front().first, lost.front().second);
}

}  // namespace rt::train
