// State-transfer messages: round trip of each, and strict decoding of damaged bytes
// (found by and kept in sync with tests/fuzz/state_transfer_fuzz.cc).
#include "cluster/state_messages.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace rt::cluster {
namespace {

StateManifest SampleManifest() {
  StateManifest m;
  m.ok = true;
  m.version = {4, 120};
  m.chunk_bytes = 1 << 20;
  m.sections = {{"params", 4096, 0x11223344}, {"rng", 16, 7}};
  return m;
}

TEST_CASE("state messages round trip") {
  auto req = DecodeStateRequest(EncodeStateRequest({{3, -1}}), "t");
  REQUIRE(req.ok());
  CHECK(req->want == StateVersion{3, -1});

  auto man = DecodeStateManifest(EncodeStateManifest(SampleManifest()), 1 << 30, "t");
  REQUIRE(man.ok());
  CHECK(man->ok);
  CHECK(man->version == StateVersion{4, 120});
  CHECK(man->chunk_bytes == 1u << 20);
  REQUIRE(man->sections.size() == 2);
  CHECK(man->sections[1].name == "rng");
  CHECK(man->sections[1].bytes == 16);
  CHECK(man->sections[1].crc32c == 7);

  StateManifest refused;
  refused.reason = "not the requested version";
  auto no = DecodeStateManifest(EncodeStateManifest(refused), 1 << 30, "t");
  REQUIRE(no.ok());
  CHECK_FALSE(no->ok);
  CHECK(no->reason == refused.reason);

  auto chunk = DecodeStateChunkHeader(EncodeStateChunkHeader({1, 8192, 4096, 9}), "t");
  REQUIRE(chunk.ok());
  CHECK(chunk->section == 1);
  CHECK(chunk->offset == 8192);
  CHECK(chunk->bytes == 4096);
  CHECK(chunk->crc32c == 9);

  auto ack = DecodeStateAck(EncodeStateAck({false, std::string(10000, 'x')}), "t");
  REQUIRE(ack.ok());
  CHECK(ack->reason.size() == kMaxStateReason);  // cut, never refused
}

TEST_CASE("state messages: damaged or hostile bytes are DataLoss, never a crash") {
  const std::vector<uint8_t> good = EncodeStateManifest(SampleManifest());
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation
    auto m = DecodeStateManifest({good.data(), n}, 1 << 30, "link");
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == absl::StatusCode::kDataLoss);
  }
  std::vector<uint8_t> trailing = good;
  trailing.push_back(0);
  CHECK(DecodeStateManifest(trailing, 1 << 30, "link").status().code() ==
        absl::StatusCode::kDataLoss);
  std::vector<uint8_t> bad_bool = good;
  bad_bool[5] = 2;  // ok is 0 or 1
  CHECK(DecodeStateManifest(bad_bool, 1 << 30, "link").status().code() ==
        absl::StatusCode::kDataLoss);
  // Another message type where a manifest is expected names both types.
  auto wrong = DecodeStateManifest(EncodeStateAck({true, ""}), 1 << 30, "link");
  CHECK(wrong.status().message() == "link: malformed message: message type 4 where 2 was expected");

  StateManifest dup = SampleManifest();
  dup.sections[1].name = "params";
  CHECK(DecodeStateManifest(EncodeStateManifest(dup), 1 << 30, "link").status().code() ==
        absl::StatusCode::kDataLoss);
  StateManifest zero = SampleManifest();
  zero.chunk_bytes = 0;
  CHECK(DecodeStateManifest(EncodeStateManifest(zero), 1 << 30, "link").status().code() ==
        absl::StatusCode::kDataLoss);
  StateManifest huge = SampleManifest();
  huge.sections[0].bytes = UINT64_MAX;  // the running total must not wrap
  CHECK(DecodeStateManifest(EncodeStateManifest(huge), 1 << 30, "link").status().code() ==
        absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace rt::cluster
