// Fuzzes the block-scaled int8/int4 decoder (collective/block_quant.h). The value count
// and the width are taken from the input's own header (the count capped), so inputs get
// past those checks. An accepted message has exactly the encoded size of its count; its
// values are finite; re-encoded (the encoder may pick other scales: a block whose
// integers do not reach Q is re-scaled) it has the same size, decodes again, and the
// decoded values plus the residual give back the values (error feedback loses nothing).
#include <cmath>
#include <cstdint>
#include <vector>

#include "collective/block_quant.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  constexpr uint32_t kMaxValues = 1u << 20;
  uint32_t count = size >= 12 ? rt::fuzz::LoadLe<uint32_t>(data + 8) : 100;
  if (count > kMaxValues) count = kMaxValues;
  const int bits = size >= 6 && data[5] == 4 ? 4 : 8;
  std::vector<float> out(count);
  const absl::Status st = rt::collective::DecodeQuantized(in, bits, count, absl::MakeSpan(out));
  if (!st.ok()) {
    rt::fuzz::CheckErrorCode(st, {absl::StatusCode::kDataLoss});
    return 0;
  }
  FUZZ_CHECK(size == rt::collective::QuantizedBytes(count, bits));
  for (float x : out) FUZZ_CHECK(std::isfinite(x));
  std::vector<uint8_t> again;
  std::vector<float> residual(count), back(count);
  rt::collective::EncodeQuantized(out, bits, absl::MakeSpan(residual), &again);
  FUZZ_CHECK(again.size() == size);
  FUZZ_CHECK(rt::collective::DecodeQuantized(again, bits, count, absl::MakeSpan(back)).ok());
  for (size_t i = 0; i < count; ++i) {
    FUZZ_CHECK(std::fabs(back[i] + residual[i] - out[i]) <= std::fabs(out[i]) * 1e-6f);
  }
  return 0;
}
