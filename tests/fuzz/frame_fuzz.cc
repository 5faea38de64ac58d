// Fuzzes the wire frame decoders (net/frame.h, net/frame_codec.h). The input is read
// (1) as one frame by DecodeFrame, which must re-encode to the same bytes, lie within
// the input and respect the payload bound; (2) as the byte stream one connection
// receives, frame after frame through IncomingFrames until the first error (which
// closes a link), on a plain link and on a link sealed under a fixed key (seeds made
// with that key): every accepted frame has the next sequence number, its type's
// limit and place. (1) and the plain stream also run with the checksums made right,
// so that the fuzzer reaches the checks behind them.
#include <cstdint>
#include <vector>

#include <cstring>

#include "core/crc32c.h"
#include "fuzz_check.h"
#include "net/frame.h"
#include "net/frame_codec.h"

namespace {

using rt::net::kFrameHeaderBytes;

constexpr uint64_t kMaxPayload = 1 << 16;  // small, so the oversize path is reachable

void Check(absl::Span<const uint8_t> bytes) {
  auto frame = rt::net::DecodeFrame(bytes, kMaxPayload, "fuzz peer");
  if (!frame.ok()) {
    rt::fuzz::CheckErrorCode(
        frame.status(),
        {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument,
         absl::StatusCode::kResourceExhausted, absl::StatusCode::kFailedPrecondition});
    return;
  }
  FUZZ_CHECK(frame->header.payload_bytes == frame->payload.size());
  FUZZ_CHECK(frame->header.payload_bytes <= kMaxPayload);
  FUZZ_CHECK(frame->frame_bytes == kFrameHeaderBytes + frame->payload.size());
  FUZZ_CHECK(frame->frame_bytes <= bytes.size());
  FUZZ_CHECK(rt::net::IsKnownFrameType(static_cast<uint8_t>(frame->header.type)));
  const std::vector<uint8_t> again = rt::net::EncodeFrame(frame->header, frame->payload);
  FUZZ_CHECK(rt::fuzz::SameBytes(again, bytes.first(frame->frame_bytes)));
  // The same header decoded on its own, and the order rules of a fresh connection.
  auto header = rt::net::DecodeFrameHeader(bytes.data(), kMaxPayload, "fuzz peer");
  FUZZ_CHECK(header.ok());
  rt::net::FrameOrderChecker order("fuzz peer");
  order.set_min_epoch(frame->header.epoch / 2);
  const absl::Status st = order.Check(frame->header);
  FUZZ_CHECK(st.ok() == (frame->header.sequence == 0));
}

// Makes the header crc (and the payload crc, over what the input holds of it) right.
void FixChecksums(uint8_t* frame, size_t available) {
  const uint64_t announced = rt::fuzz::LoadLe<uint64_t>(frame + 32);
  const size_t payload = std::min<uint64_t>(announced, available - kFrameHeaderBytes);
  rt::fuzz::StoreLe<uint32_t>(frame + 40, rt::Crc32c(frame + kFrameHeaderBytes, payload));
  rt::fuzz::StoreLe<uint32_t>(frame + 44, rt::Crc32c(frame, 44));
}

void CheckStream(absl::Span<const uint8_t> bytes, bool sealed, bool fix_checksums) {
  rt::net::FrameLimits limits;
  limits.data_bytes = kMaxPayload;
  rt::net::IncomingFrames in("fuzz peer", limits);
  if (sealed) in.SetKey(rt::fuzz::kFrameKey);
  std::vector<uint8_t> buf(bytes.begin(), bytes.end());
  size_t pos = 0;
  uint64_t expect_sequence = 0;
  while (buf.size() - pos >= kFrameHeaderBytes) {
    uint8_t* frame = buf.data() + pos;
    if (fix_checksums) FixChecksums(frame, buf.size() - pos);
    auto header = in.Begin(frame);
    if (!header.ok()) {
      rt::fuzz::CheckErrorCode(
          header.status(),
          {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument,
           absl::StatusCode::kResourceExhausted, absl::StatusCode::kFailedPrecondition});
      return;
    }
    FUZZ_CHECK(header->sequence == expect_sequence++);
    FUZZ_CHECK(header->payload_bytes <= limits.For(header->type));
    FUZZ_CHECK(
        rt::net::CheckFramePosition(header->type, header->sequence, in.established(), "fuzz peer")
            .ok());
    pos += kFrameHeaderBytes;
    if (buf.size() - pos < header->payload_bytes) return;  // the link waits for the rest
    const size_t n = header->payload_bytes;
    in.TakePayload(buf.data() + pos, n / 2);  // in two pieces, as a socket may hand them
    in.TakePayload(buf.data() + pos + n / 2, n - n / 2);
    pos += n;
    const size_t t = in.trailer_bytes();
    if (buf.size() - pos < t) return;
    std::memcpy(in.trailer(), buf.data() + pos, t);
    pos += t;
    const absl::Status st = in.Finish();
    if (!st.ok()) {
      rt::fuzz::CheckErrorCode(st, {absl::StatusCode::kDataLoss});
      return;
    }
    // The handshake ends with the fingerprint (TcpConnection::Establish).
    if (header->type == rt::net::FrameType::kFingerprint) in.set_established();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> in(data, data + size);
  Check(in);
  CheckStream(in, /*sealed=*/false, /*fix_checksums=*/false);
  CheckStream(in, /*sealed=*/true, /*fix_checksums=*/false);
  CheckStream(in, /*sealed=*/false, /*fix_checksums=*/true);
  if (size >= kFrameHeaderBytes) {
    FixChecksums(in.data(), size);
    Check(in);
  }
  return 0;
}
