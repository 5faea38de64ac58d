// Fuzzes the membership message envelope decoder (cluster/messages.h), the payload of
// every control frame. Each input is tried as received and with its checksum made
// right. A decoded envelope must re-encode to the same bytes; errors are DataLoss.
#include <cstdint>
#include <vector>

#include "cluster/messages.h"
#include "core/crc32c.h"
#include "fuzz_check.h"

namespace {

using rt::cluster::kEnvelopeHeaderBytes;

void Check(absl::Span<const uint8_t> bytes) {
  auto env = rt::cluster::DecodeEnvelope(bytes, "fuzz link");
  if (!env.ok()) {
    rt::fuzz::CheckErrorCode(env.status(), {absl::StatusCode::kDataLoss});
    return;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(rt::cluster::EncodeEnvelope(*env), bytes));
  FUZZ_CHECK(rt::cluster::MessageName(env->message) != nullptr);
  rt::cluster::EpochGate gate(env->epoch);
  FUZZ_CHECK(gate.Admit(*env).ok());
  if (env->epoch < UINT64_MAX) {
    gate.Advance(env->epoch + 1);
    FUZZ_CHECK(gate.Admit(*env).code() == absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> in(data, data + size);
  Check(in);
  if (size >= kEnvelopeHeaderBytes) {
    const uint32_t body = rt::fuzz::LoadLe<uint32_t>(in.data() + 16);
    const size_t n = std::min<uint64_t>(body, size - kEnvelopeHeaderBytes);
    uint32_t crc = rt::Crc32c(in.data(), 20);
    crc = rt::Crc32cExtend(crc, in.data() + kEnvelopeHeaderBytes, n);
    rt::fuzz::StoreLe<uint32_t>(in.data() + 20, crc);
    Check(in);
  }
  return 0;
}
