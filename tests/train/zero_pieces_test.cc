// ZeRO-1 pieces and their moves when the ring changes (train/zero_pieces.h). The move
// plans are checked by simulation: every old member's holdings (own pieces and
// replica) are marked, every planned move must read floats its source really holds,
// and every member's new pieces and replica must be filled exactly once.
#include "train/zero_pieces.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace {

using rt::train::FloatRange;
using rt::train::OwnedPieces;
using rt::train::PieceMovePlan;
using rt::train::PlanPieceMoves;
using rt::train::ReplicaPieces;
using rt::train::ZeroPieces;
using rt::train::ZeroRing;

constexpr size_t kLength = 10007;
constexpr size_t kBucketBytes = 4 * 1500;  // 7 buckets, the lowest one shorter

// What each id holds: [id] -> per float, own (1) / replica (2) bits.
std::map<int, std::vector<int>> Holdings(const ZeroRing& ring, const std::vector<int>& alive) {
  std::map<int, std::vector<int>> held;
  const int n = static_cast<int>(ring.order.size());
  for (int p = 0; p < n; ++p) {
    const int id = ring.order[p];
    if (std::find(alive.begin(), alive.end(), id) == alive.end()) continue;
    std::vector<int>& h = held[id];
    h.assign(kLength, 0);
    for (const FloatRange& r : OwnedPieces(kLength, ring.bucket_bytes, n, p)) {
      for (size_t i = r.first; i < r.second; ++i) h[i] |= 1;
    }
    for (const FloatRange& r : ReplicaPieces(kLength, ring.bucket_bytes, n, p)) {
      for (size_t i = r.first; i < r.second; ++i) h[i] |= 2;
    }
  }
  return held;
}

// Checks `plan` against the holdings; returns the floats moved between members.
size_t CheckPlan(const PieceMovePlan& plan, const ZeroRing& old_ring, const ZeroRing& new_ring,
                 const std::vector<int>& survivors) {
  const std::map<int, std::vector<int>> held = Holdings(old_ring, survivors);
  std::vector<char> lost(kLength, 0);
  for (const FloatRange& r : plan.lost) {
    for (size_t i = r.first; i < r.second; ++i) lost[i] = 1;
  }
  const int n = static_cast<int>(new_ring.order.size());
  REQUIRE(plan.moves.size() == static_cast<size_t>(n));
  size_t travelled = 0;
  for (int q = 0; q < n; ++q) {
    const int me = new_ring.order[q];
    std::vector<int> filled_own(kLength, 0), filled_replica(kLength, 0);
    for (const rt::train::PieceMove& m : plan.moves[q]) {
      REQUIRE(held.count(m.from) == 1);  // only survivors are sources
      const std::vector<int>& h = held.at(m.from);
      for (size_t i = m.range.first; i < m.range.second; ++i) {
        REQUIRE((h[i] & (m.from_replica ? 2 : 1)) != 0);  // the source really holds it
        (m.replica_slot ? filled_replica : filled_own)[i] += 1;
      }
      if (m.from != me) travelled += m.range.second - m.range.first;
    }
    auto check_filled = [&](const std::vector<FloatRange>& need, const std::vector<int>& filled) {
      std::vector<int> want(kLength, 0);
      for (const FloatRange& r : need) {
        for (size_t i = r.first; i < r.second; ++i) want[i] = 1;
      }
      for (size_t i = 0; i < kLength; ++i) {
        if (lost[i]) {
          REQUIRE(filled[i] == 0);
        } else {
          REQUIRE(filled[i] == want[i]);
        }
      }
    };
    check_filled(OwnedPieces(kLength, new_ring.bucket_bytes, n, q), filled_own);
    check_filled(ReplicaPieces(kLength, new_ring.bucket_bytes, n, q), filled_replica);
  }
  return travelled;
}

}  // namespace

TEST_CASE("ZeRO pieces tile the buffer once -- each position owns ~1/N and keeps its predecessor's") {
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

TEST_CASE("piece moves: the same ring moves nothing") {
  const ZeroRing ring{{0, 1, 2, 3}, kBucketBytes};
  const PieceMovePlan plan = PlanPieceMoves(kLength, ring, ring, ring.order);
  CHECK(plan.lost.empty());
  CHECK(CheckPlan(plan, ring, ring, ring.order) == 0);
}

TEST_CASE("piece moves: one peer lost (the leader or not) loses nothing") {
  const ZeroRing old_ring{{0, 1, 2, 3}, kBucketBytes};
  for (int dead : {0, 2}) {
    INFO("dead ", dead);
    ZeroRing new_ring = old_ring;
    new_ring.order.erase(std::find(new_ring.order.begin(), new_ring.order.end(), dead));
    const PieceMovePlan plan = PlanPieceMoves(kLength, old_ring, new_ring, new_ring.order);
    CHECK(plan.lost.empty());
    const size_t travelled = CheckPlan(plan, old_ring, new_ring, new_ring.order);
    MESSAGE("4 -> 3 (", dead, " lost): ", travelled, " floats travel of ", kLength);
    CHECK(travelled > 0);
  }
}

TEST_CASE("piece moves: two ring neighbours lost at once are reported, two apart are not") {
  const ZeroRing old_ring{{0, 1, 2, 3}, kBucketBytes};
  const ZeroRing apart{{1, 3}, kBucketBytes};
  PieceMovePlan plan = PlanPieceMoves(kLength, old_ring, apart, apart.order);
  CHECK(plan.lost.empty());
  CheckPlan(plan, old_ring, apart, apart.order);

  const ZeroRing neighbours{{0, 3}, kBucketBytes};  // positions 1 and 2 gone
  plan = PlanPieceMoves(kLength, old_ring, neighbours, neighbours.order);
  // Exactly position 1's pieces: owner (1) and replica holder (2) both gone.
  CHECK(plan.lost == OwnedPieces(kLength, kBucketBytes, 4, 1));
  CheckPlan(plan, old_ring, neighbours, neighbours.order);
  CHECK(rt::train::DescribeLost(plan.lost, kLength).find("had their owner and its replica") !=
        std::string::npos);
}

TEST_CASE("piece moves: joiners and a restarted peer hold nothing, a reordered ring moves") {
  const ZeroRing three{{0, 1, 2}, kBucketBytes};
  const ZeroRing four{{0, 1, 2, 3}, kBucketBytes};
  PieceMovePlan plan = PlanPieceMoves(kLength, three, four, three.order);
  CHECK(plan.lost.empty());
  CheckPlan(plan, three, four, three.order);
  for (const auto& m : plan.moves[3]) CHECK(m.from != 3);  // the joiner receives all

  // Peer 1 died and came back within one view change: a member, not a survivor.
  plan = PlanPieceMoves(kLength, four, four, {0, 2, 3});
  CHECK(plan.lost.empty());
  CheckPlan(plan, four, four, {0, 2, 3});
  for (const auto& m : plan.moves[1]) CHECK(m.from != 1);

  const ZeroRing reordered{{2, 0, 3, 1}, kBucketBytes};
  plan = PlanPieceMoves(kLength, four, reordered, four.order);
  CHECK(plan.lost.empty());
  CHECK(CheckPlan(plan, four, reordered, four.order) > 0);
}
