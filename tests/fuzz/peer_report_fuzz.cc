// Fuzzes the peer status report decoder (observe/peer_report.h): the opaque report a
// heartbeat carries from every peer to every other. A decoded report must re-encode to
// the same bytes (with room for all of it); errors are DataLoss.
#include <cstdint>
#include <vector>

#include "fuzz_check.h"
#include "observe/peer_report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  auto report = rt::observe::DecodePeerReport(in, "fuzz peer");
  if (!report.ok()) {
    rt::fuzz::CheckErrorCode(report.status(), {absl::StatusCode::kDataLoss});
    return 0;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(rt::observe::EncodePeerReport(*report, SIZE_MAX), in));
  return 0;
}
