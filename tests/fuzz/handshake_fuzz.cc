// Fuzzes the handshake message decoders (net/handshake.h): hello and fingerprint
// payloads, as a stranger may send them before authentication. A decoded message must
// re-encode to the same bytes; a decoded fingerprint equals itself and its differences
// from another one are reported exactly when the comparison fails.
#include <cstdint>
#include <vector>

#include "fuzz_check.h"
#include "net/handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  const std::string peer = "fuzz peer";

  auto hello = rt::net::DecodeHello(in, peer);
  if (hello.ok()) {
    FUZZ_CHECK(rt::fuzz::SameBytes(rt::net::EncodeHello(*hello), in));
  } else {
    rt::fuzz::CheckErrorCode(hello.status(),
                             {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument,
                              absl::StatusCode::kFailedPrecondition});
  }

  auto fp = rt::net::DecodeFingerprint(in, peer);
  if (!fp.ok()) {
    rt::fuzz::CheckErrorCode(fp.status(),
                             {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument,
                              absl::StatusCode::kFailedPrecondition});
    return 0;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(rt::net::EncodeFingerprint(*fp), in));
  FUZZ_CHECK(rt::net::FingerprintDifference(*fp, *fp).empty());
  FUZZ_CHECK(rt::net::CompareFingerprints(*fp, *fp, peer).ok());
  const rt::net::Fingerprint ours = {
      {"model", "layers=2 heads=4 dim=64"}, {"lr", "0.001"}, {"tokenizer", "t1"}};
  for (int side = 0; side < 2; ++side) {
    const auto& a = side == 0 ? ours : *fp;
    const auto& b = side == 0 ? *fp : ours;
    const std::string diff = rt::net::FingerprintDifference(a, b);
    const absl::Status cmp = rt::net::CompareFingerprints(a, b, peer);
    FUZZ_CHECK(cmp.ok() == diff.empty());
    if (!cmp.ok()) FUZZ_CHECK(cmp.code() == absl::StatusCode::kFailedPrecondition);
  }
  return 0;
}
