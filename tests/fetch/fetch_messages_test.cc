// Data-fetch messages: every kind round-trips; the decoder refuses wrong magic or
// version, unknown kinds, truncation, trailing bytes, oversized chunks and reasons,
// and file names that could leave the data directory.
#include <doctest/doctest.h>

#include "core/byte_codec.h"
#include "fetch/fetch_messages.h"

namespace rt::fetch {
namespace {

FetchMessage RoundTrip(const FetchMessage& m) {
  absl::StatusOr<FetchMessage> d = DecodeFetchMessage(EncodeFetchMessage(m), "peer");
  REQUIRE_MESSAGE(d.ok(), d.status().message());
  return *d;
}

std::vector<uint8_t> Raw(uint8_t kind, const std::string& file) {
  std::vector<uint8_t> out;
  ByteWriter w(&out);
  w.Int<uint32_t>(kFetchMagic);
  w.Int<uint8_t>(kFetchProtocolVersion);
  w.Int<uint8_t>(kind);
  w.String(file);
  w.Int<uint64_t>(0);
  return out;
}

}  // namespace

TEST_CASE("fetch messages: every kind round-trips") {
  FetchMessage m;
  m.kind = FetchKind::kManifestRequest;
  CHECK(RoundTrip(m).kind == FetchKind::kManifestRequest);
  m.kind = FetchKind::kManifest;
  m.text = "format ringtrain-data 1\n";
  CHECK(RoundTrip(m).text == m.text);
  m.kind = FetchKind::kFileRequest;
  m.file = "train-00003.bin";
  m.offset = 123456789012ull;
  FetchMessage r = RoundTrip(m);
  CHECK(r.file == m.file);
  CHECK(r.offset == m.offset);
  m.kind = FetchKind::kFileStart;
  m.size = 1ull << 40;
  CHECK(RoundTrip(m).size == m.size);
  m.kind = FetchKind::kChunk;
  m.offset = 64;
  m.bytes = {1, 2, 3, 250};
  r = RoundTrip(m);
  CHECK(r.offset == 64);
  CHECK(r.bytes == m.bytes);
  CHECK(r.file == m.file);
  m.kind = FetchKind::kRefused;
  m.text = "corrupt on this peer";
  r = RoundTrip(m);
  CHECK(r.text == m.text);
  CHECK(r.file == m.file);
  m.kind = FetchKind::kStatus;
  m.complete = true;
  m.have_bytes = 7;
  m.total_bytes = 9;
  r = RoundTrip(m);
  CHECK(r.complete);
  CHECK(r.have_bytes == 7);
  CHECK(r.total_bytes == 9);
}

TEST_CASE("fetch messages: malformed input is refused with a reason") {
  FetchMessage m;
  m.kind = FetchKind::kFileRequest;
  m.file = "val-00000.bin";
  std::vector<uint8_t> good = EncodeFetchMessage(m);
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to ", n);
    CHECK_FALSE(DecodeFetchMessage(absl::MakeConstSpan(good.data(), n), "p").ok());
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  CHECK(DecodeFetchMessage(longer, "p").status().message().find("trailing") != std::string::npos);
  std::vector<uint8_t> bad = good;
  bad[0] ^= 1;
  CHECK_FALSE(DecodeFetchMessage(bad, "p").ok());
  bad = good;
  bad[4] = kFetchProtocolVersion + 1;
  CHECK(DecodeFetchMessage(bad, "p").status().message().find("version") != std::string::npos);
  bad = good;
  bad[5] = 77;
  CHECK(DecodeFetchMessage(bad, "p").status().message().find("unknown kind") != std::string::npos);
  for (const char* name : {"../etc/passwd", "/etc/passwd", "a/b", ".fetch", "..", "", "a b"}) {
    INFO(name);
    absl::StatusOr<FetchMessage> d =
        DecodeFetchMessage(Raw(static_cast<uint8_t>(FetchKind::kFileRequest), name), "p");
    CHECK_FALSE(d.ok());
  }
  CHECK(DecodeFetchMessage(Raw(static_cast<uint8_t>(FetchKind::kFileRequest), "ok.bin"), "p").ok());
  FetchMessage big;
  big.kind = FetchKind::kChunk;
  big.file = "x.bin";
  big.bytes.assign(kMaxChunkBytes + 1, 0);
  CHECK_FALSE(DecodeFetchMessage(EncodeFetchMessage(big), "p").ok());
  big.bytes.clear();
  CHECK(DecodeFetchMessage(EncodeFetchMessage(big), "p").status().message().find("empty") !=
        std::string::npos);
  FetchMessage reason;
  reason.kind = FetchKind::kNoData;
  reason.text.assign(kMaxReasonBytes + 1, 'x');
  CHECK_FALSE(DecodeFetchMessage(EncodeFetchMessage(reason), "p").ok());
  FetchMessage status;
  status.kind = FetchKind::kStatus;
  std::vector<uint8_t> s = EncodeFetchMessage(status);
  s[6] = 2;  // a bool other than 0/1
  CHECK_FALSE(DecodeFetchMessage(s, "p").ok());
}

}  // namespace rt::fetch
