// Frames: round trip, and the decoder's refusal of every kind of bad frame.
#include "net/frame.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using rt::net::DecodeFrame;
using rt::net::EncodeFrame;
using rt::net::FrameHeader;
using rt::net::FrameType;

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

std::vector<uint8_t> Payload(size_t n) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7 + 1);
  return p;
}

FrameHeader Header(uint64_t seq, uint64_t epoch = 3) {
  FrameHeader h;
  h.type = FrameType::kData;
  h.codec = 2;
  h.epoch = epoch;
  h.step = 99;
  h.sequence = seq;
  return h;
}

}  // namespace

TEST_CASE("frame: encode/decode round trip") {
  auto payload = Payload(1000);
  auto bytes = EncodeFrame(Header(5), payload);
  CHECK(bytes.size() == rt::net::kFrameHeaderBytes + 1000);
  auto f = DecodeFrame(bytes, 1 << 20, "rank 1");
  REQUIRE(f.ok());
  CHECK(f->header.type == FrameType::kData);
  CHECK(f->header.codec == 2);
  CHECK(f->header.epoch == 3);
  CHECK(f->header.step == 99);
  CHECK(f->header.sequence == 5);
  CHECK(f->header.payload_bytes == 1000);
  CHECK(std::vector<uint8_t>(f->payload.begin(), f->payload.end()) == payload);
  CHECK(f->frame_bytes == bytes.size());
  auto empty = DecodeFrame(EncodeFrame(Header(0), {}), 1 << 20, "rank 1");
  REQUIRE(empty.ok());
  CHECK(empty->payload.empty());
}

TEST_CASE("frame: decoder refuses bad frames, naming the peer") {
  auto good = EncodeFrame(Header(0), Payload(64));
  const std::string peer = "rank 2 (10.0.0.3:29500)";

  SUBCASE("truncated header") {
    auto r = DecodeFrame(absl::MakeConstSpan(good.data(), 20), 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "truncated"));
    CHECK(Contains(r.status(), peer));
  }
  SUBCASE("truncated payload") {
    auto r = DecodeFrame(absl::MakeConstSpan(good.data(), good.size() - 1), 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "truncated"));
  }
  SUBCASE("oversized") {
    auto r = DecodeFrame(good, 63, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(absl::IsResourceExhausted(r.status()));
    CHECK(Contains(r.status(), "limit of 63"));
  }
  SUBCASE("wrong magic") {
    good[0] ^= 0xff;
    auto r = DecodeFrame(good, 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "wrong magic"));
    CHECK(Contains(r.status(), peer));
  }
  SUBCASE("wrong version") {
    std::vector<uint8_t> bytes = good;
    bytes[4] = 9;  // version field; checked before the header checksum
    auto r = DecodeFrame(bytes, 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "version 9"));
  }
  SUBCASE("corrupt header") {
    good[20] ^= 1;  // inside step
    auto r = DecodeFrame(good, 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "header checksum"));
  }
  SUBCASE("corrupt payload") {
    good.back() ^= 0x10;
    auto r = DecodeFrame(good, 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(absl::IsDataLoss(r.status()));
    CHECK(Contains(r.status(), "corrupt payload"));
  }
  SUBCASE("unknown type") {
    auto h = Header(0);
    h.type = static_cast<FrameType>(77);
    auto bytes = EncodeFrame(h, {});
    auto r = DecodeFrame(bytes, 1 << 20, peer);
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "unknown type 77"));
  }
}

TEST_CASE("frame: order checker refuses gaps, repeats and older epochs") {
  rt::net::FrameOrderChecker order("rank 1");
  order.set_min_epoch(3);
  CHECK(order.Check(Header(0, 3)).ok());
  CHECK(order.Check(Header(1, 4)).ok());
  auto repeat = order.Check(Header(1, 4));
  REQUIRE_FALSE(repeat.ok());
  CHECK(Contains(repeat, "out of sequence: got 1, expected 2"));
  auto gap = order.Check(Header(5, 4));
  REQUIRE_FALSE(gap.ok());
  CHECK(Contains(gap, "expected 2"));
  auto old = order.Check(Header(2, 2));
  REQUIRE_FALSE(old.ok());
  CHECK(Contains(old, "epoch 2, older than the current epoch 3"));
  CHECK(Contains(old, "rank 1"));
}
