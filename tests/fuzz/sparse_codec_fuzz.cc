// Fuzzes the sparse gradient decoder (collective/sparse_codec.h). The bucket length
// is taken from the input's own header (capped at what a real bucket may hold), so
// inputs get past the length check. A decoded vector must have strictly increasing
// indices below the length and one value per index, and must survive re-encoding,
// raw and with zstd, bit for bit.
#include <cstdint>
#include <vector>

#include "collective/sparse_codec.h"
#include "fuzz_check.h"

namespace {

constexpr uint32_t kMaxBucketFloats = 1u << 20;  // the decoder's buffers scale with it

void CheckSameVector(const rt::collective::SparseVector& a, const rt::collective::SparseVector& b) {
  FUZZ_CHECK(a.indices == b.indices);
  FUZZ_CHECK(a.values == b.values);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  uint32_t length = size >= 12 ? rt::fuzz::LoadLe<uint32_t>(data + 8) : 1000;
  if (length > kMaxBucketFloats) length = kMaxBucketFloats;

  rt::collective::SparseVector v;
  const absl::Status st = rt::collective::DecodeSparse(in, length, &v);
  if (!st.ok()) {
    rt::fuzz::CheckErrorCode(st, {absl::StatusCode::kDataLoss});
    return 0;
  }
  FUZZ_CHECK(v.indices.size() == v.values.size());
  FUZZ_CHECK(v.indices.size() <= length);
  for (size_t i = 0; i < v.indices.size(); ++i) {
    FUZZ_CHECK(v.indices[i] < length);
    if (i > 0) FUZZ_CHECK(v.indices[i] > v.indices[i - 1]);
  }
  for (int level : {0, 1}) {
    std::vector<uint8_t> encoded;
    rt::collective::EncodeSparse(v, length, level, &encoded);
    rt::collective::SparseVector again;
    FUZZ_CHECK(rt::collective::DecodeSparse(encoded, length, &again).ok());
    CheckSameVector(v, again);
  }
  return 0;
}
