// Fuzzes the wire frame decoder (net/frame.h): DecodeFrame and the receive-order rules.
// Each input is tried as received and again with both checksums made right, so that
// the fuzzer reaches the checks behind them. A decoded frame must re-encode to the
// same bytes, lie within the input and respect the payload bound.
#include <cstdint>
#include <vector>

#include "core/crc32c.h"
#include "fuzz_check.h"
#include "net/frame.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> in(data, data + size);
  Check(in);
  if (size >= kFrameHeaderBytes) {
    const uint64_t announced = rt::fuzz::LoadLe<uint64_t>(in.data() + 32);
    const size_t payload = std::min<uint64_t>(announced, size - kFrameHeaderBytes);
    rt::fuzz::StoreLe<uint32_t>(in.data() + 40, rt::Crc32c(in.data() + kFrameHeaderBytes, payload));
    rt::fuzz::StoreLe<uint32_t>(in.data() + 44, rt::Crc32c(in.data(), 44));
    Check(in);
  }
  return 0;
}
