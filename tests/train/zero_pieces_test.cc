// ZeRO-1 pieces (train/zero_pieces.h): the cut tiles the buffer, each position owns
// about 1/N and keeps its predecessor's as replica. What moves when the ring changes is
// tested with collective::ExchangePieces (tests/collective/piece_exchange_test.cc) and
// end to end in tests/integration/zero_ring_test.cc.
#include "train/zero_pieces.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

namespace {

using rt::train::FloatRange;
using rt::train::OwnedPieces;
using rt::train::ReplicaPieces;
using rt::train::ZeroPieces;

constexpr size_t kLength = 10007;
constexpr size_t kBucketBytes = 4 * 1500;  // 7 buckets, the lowest one shorter

}  // namespace

TEST_CASE(
    "ZeRO pieces tile the buffer once -- each position owns ~1/N and keeps its predecessor's") {
  for (int n : {1, 2, 3, 4, 7}) {
    INFO(n, " peers");
    std::vector<int> count(kLength, 0);
    for (const auto& p : ZeroPieces(kLength, kBucketBytes, n)) {
      for (size_t i = p.begin; i < p.end; ++i) count[i] += 1;
    }
    CHECK(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }));
    for (int p = 0; p < n; ++p) {
      size_t owned = 0;
      for (const FloatRange& r : OwnedPieces(kLength, kBucketBytes, n, p))
        owned += r.second - r.first;
      CHECK(owned <= kLength / n + 7);  // one float per bucket at most above the share
      CHECK(owned + 7 >= kLength / n);
      CHECK(ReplicaPieces(kLength, kBucketBytes, n, p) ==
            (n == 1 ? std::vector<FloatRange>()
                    : OwnedPieces(kLength, kBucketBytes, n, (p + n - 1) % n)));
    }
  }
}
