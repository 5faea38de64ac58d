// The ZeRO-1 piece cut (see zero_pieces.h).
#include "train/zero_pieces.h"

#include <algorithm>

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

}  // namespace rt::train
