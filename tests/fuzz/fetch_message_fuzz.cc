// Fuzzes the data-fetch message decoder (fetch/fetch_messages.h): the bytes a peer
// fetching or serving the data directory receives from another. A decoded message
// must re-encode to the same bytes, name only plain files (no path out of the data
// directory) and keep its chunk and texts within their bounds; everything else is
// refused as DataLoss.
#include <cstdint>

#include "data/data_manifest.h"
#include "fetch/fetch_messages.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rt::fetch;
  const absl::Span<const uint8_t> in(data, size);
  absl::StatusOr<FetchMessage> m = DecodeFetchMessage(in, "fuzz");
  if (!m.ok()) {
    rt::fuzz::CheckErrorCode(m.status(), {absl::StatusCode::kDataLoss});
    return 0;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(EncodeFetchMessage(*m), in));
  if (!m->file.empty()) FUZZ_CHECK(rt::data::IsPlainFileName(m->file));
  const bool names_file = m->kind == FetchKind::kFileRequest || m->kind == FetchKind::kFileStart ||
                          m->kind == FetchKind::kChunk || m->kind == FetchKind::kRefused;
  FUZZ_CHECK(names_file == !m->file.empty());
  FUZZ_CHECK(m->bytes.size() <= kMaxChunkBytes);
  FUZZ_CHECK(m->kind != FetchKind::kChunk || !m->bytes.empty());
  FUZZ_CHECK(m->text.size() <= kMaxManifestBytes);
  return 0;
}
