// The piece exchange's plan (nearest upstream holder, merged transfers, lost parts)
// and its descriptor encoding, which refuses malformed bytes.
#include "collective/piece_exchange_plan.h"

#include <doctest/doctest.h>

#include <string>

#include "core/byte_codec.h"

namespace rt::collective {
namespace {

PieceDescriptor Describe(std::vector<FloatRange> held, std::vector<FloatRange> needed,
                         uint64_t length = 100) {
  PieceDescriptor d;
  d.length = length;
  d.buffers = 2;
  d.chunk_floats = 16;
  d.held = std::move(held);
  d.needed = std::move(needed);
  return d;
}

std::string Describe(const PieceTransfer& t) {
  std::string s = "[" + std::to_string(t.range.first) + "," + std::to_string(t.range.second) +
                  ") from " + std::to_string(t.sender) + " to";
  for (int r : t.receivers) s += " " + std::to_string(r);
  return s + " hops " + std::to_string(t.hops);
}

std::vector<std::string> Describe(const PiecePlan& plan) {
  std::vector<std::string> out;
  for (const PieceTransfer& t : plan.transfers) out.push_back(Describe(t));
  return out;
}

TEST_CASE("piece plan: each receiver takes its floats from its nearest upstream holder") {
  // Positions 0 and 2 hold [0, 50); 1 and 3 need it: two one-hop transfers, not one
  // pass of three hops.
  std::vector<PieceDescriptor> ring = {Describe({{0, 50}}, {}), Describe({}, {{0, 50}}),
                                       Describe({{0, 50}}, {}), Describe({}, {{0, 50}})};
  CHECK(Describe(PlanPieceExchange(ring)) ==
        std::vector<std::string>{"[0,50) from 0 to 1 hops 1", "[0,50) from 2 to 3 hops 1"});
  // Only position 2 holds: one pass around the ring, receivers in ring order from it.
  ring[0].held.clear();
  ring[0].needed = {{0, 50}};
  CHECK(Describe(PlanPieceExchange(ring)) ==
        std::vector<std::string>{"[0,50) from 2 to 3 0 1 hops 3"});
}

TEST_CASE("piece plan: members that do not need the floats only forward them") {
  const std::vector<PieceDescriptor> ring = {Describe({{0, 100}}, {}), Describe({}, {}),
                                             Describe({}, {{20, 30}}), Describe({}, {})};
  const PiecePlan plan = PlanPieceExchange(ring);
  CHECK(Describe(plan) == std::vector<std::string>{"[20,30) from 0 to 2 hops 2"});
  CHECK(plan.lost.empty());
}

TEST_CASE("piece plan: adjacent intervals with the same sender and receivers are one transfer") {
  // Many small held and needed ranges cut [0, 100) finely; the transfer is one.
  const std::vector<PieceDescriptor> ring = {
      Describe({{0, 10}, {10, 25}, {25, 60}, {60, 100}}, {}),
      Describe({}, {{0, 5}, {5, 50}, {50, 100}}),
      Describe({{30, 40}}, {{30, 40}}),  // a holder that needs nothing from the ring
  };
  const PiecePlan plan = PlanPieceExchange(ring);
  CHECK(Describe(plan) == std::vector<std::string>{"[0,100) from 0 to 1 hops 1"});
  // A third member needing a middle part splits the pass into three.
  std::vector<PieceDescriptor> more = ring;
  more[2].needed = {{30, 45}};
  CHECK(Describe(PlanPieceExchange(more)) ==
        std::vector<std::string>{"[0,40) from 0 to 1 hops 1", "[40,45) from 0 to 1 2 hops 2",
                                 "[45,100) from 0 to 1 hops 1"});
}

TEST_CASE("piece plan: parts needed and held by nobody are lost, merged") {
  const std::vector<PieceDescriptor> ring = {Describe({{0, 10}, {40, 100}}, {{0, 100}}),
                                             Describe({}, {{10, 20}, {20, 30}, {50, 60}})};
  const PiecePlan plan = PlanPieceExchange(ring);
  CHECK(plan.lost == std::vector<FloatRange>{{10, 40}});
  CHECK(Describe(plan) == std::vector<std::string>{"[50,60) from 0 to 1 hops 1"});
}

TEST_CASE("piece descriptor: encoding round-trips") {
  const PieceDescriptor d = Describe({{0, 10}, {10, 20}, {50, 60}}, {{5, 6}}, 1ull << 40);
  absl::StatusOr<PieceDescriptor> back = DecodePieceDescriptor(EncodePieceDescriptor(d));
  REQUIRE(back.ok());
  CHECK(back->length == d.length);
  CHECK(back->buffers == d.buffers);
  CHECK(back->chunk_floats == d.chunk_floats);
  CHECK(back->held == d.held);
  CHECK(back->needed == d.needed);
}

TEST_CASE("piece descriptor: malformed bytes are refused, never trusted") {
  const std::vector<uint8_t> good = EncodePieceDescriptor(Describe({{0, 10}}, {{20, 30}}));
  auto refused = [](const std::vector<uint8_t>& bytes, const std::string& why) {
    absl::StatusOr<PieceDescriptor> d = DecodePieceDescriptor(bytes);
    CAPTURE(why);
    REQUIRE(absl::IsDataLoss(d.status()));
    CHECK(std::string(d.status().message()).find(why) != std::string::npos);
  };
  for (size_t cut = 0; cut < good.size(); ++cut) {  // "truncated" or a count too large
    refused(std::vector<uint8_t>(good.begin(), good.begin() + cut), "");
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  refused(longer, "trailing bytes");
  std::vector<uint8_t> magic = good;
  magic[0] ^= 1;
  refused(magic, "not a piece descriptor");

  // Hand-built descriptors: (held, needed) as written, with the fixed fields given.
  auto build = [](uint64_t length, int32_t buffers, uint64_t chunk, uint32_t held_count,
                  const std::vector<uint64_t>& numbers) {
    std::vector<uint8_t> bytes;
    ByteWriter w(&bytes);
    w.Int<uint32_t>(0x31445850);
    w.Int<uint64_t>(length);
    w.Int<int32_t>(buffers);
    w.Int<uint64_t>(chunk);
    w.Int<uint32_t>(held_count);
    for (uint64_t x : numbers) w.Int<uint64_t>(x);
    return bytes;
  };
  auto with_needed = [](std::vector<uint8_t> bytes, uint32_t count) {
    ByteWriter w(&bytes);
    w.Int<uint32_t>(count);
    return bytes;
  };
  refused(build(100, 2, 16, 0xffffffffu, {}), "ranges in");  // a count no bytes back
  refused(with_needed(build(100, 2, 16, 1, {0, 10}), 1000), "ranges in");
  refused(with_needed(build(100, 2, 16, 2, {20, 30, 0, 10}), 0), "sorted");
  refused(with_needed(build(100, 2, 16, 2, {0, 30, 20, 40}), 0), "sorted");
  refused(with_needed(build(100, 2, 16, 1, {90, 101}), 0), "within");
  refused(with_needed(build(100, 2, 16, 1, {~uint64_t{0} - 5, 3}), 0), "within");
  refused(with_needed(build(100, 0, 16, 0, {}), 0), "0 buffers");
  refused(with_needed(build(100, -3, 16, 0, {}), 0), "-3 buffers");
  refused(with_needed(build(100, 2, 0, 0, {}), 0), "0 floats per chunk");
  refused(with_needed(build(100, 2, kMaxPieceChunkFloats + 1, 0, {}), 0), "floats per chunk");
  refused(with_needed(build(~uint64_t{0}, 2, 16, 0, {}), 0), "length");
  CHECK(DecodePieceDescriptor(with_needed(build(100, 2, 16, 1, {0, 100}), 0)).ok());
}

}  // namespace
}  // namespace rt::collective
