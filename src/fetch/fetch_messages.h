// The messages of the data-fetch protocol (see docs/data-fetch.md): what a peer that
// lacks the prepared data directory asks a peer that has it, and the answers.
//
// They travel on authenticated links (net/tcp_node.h, kDataFetchChannel): requests in
// kControl frames, answers in kData frames (a manifest or a file chunk can exceed the
// control-frame bound). Every message is, little-endian:
//   magic u32 "RTDF" | version u8 = kFetchProtocolVersion | kind u8 | fields of the kind
// Kinds and their fields (strings are u32 length + bytes):
//   kManifestRequest  -                             "send me your manifest"
//   kManifest         text                          the manifest's exact bytes
//   kNoData           text                          why not (no data here, not yet)
//   kFileRequest      file, offset u64              "stream file from offset to its end"
//   kFileStart        file, size u64                the answer: its size; chunks follow
//   kChunk            file, offset u64, bytes       consecutive, in order, to the end
//   kRefused          file, text                    this file is not served here: why
//   kStatusRequest    -                             "do you have everything?"
//   kStatus           complete u8, have u64, total u64   (bytes; total 0 = unknown)
// DecodeFetchMessage refuses anything malformed: unknown kind, trailing bytes, a file
// name that is not a plain name of a data directory (data::IsPlainFileName: no '/',
// no leading '.', so no path traversal), texts and chunks above their bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::fetch {

inline constexpr uint32_t kFetchMagic = 0x46445452u;  // "RTDF" in memory order
inline constexpr uint8_t kFetchProtocolVersion = 1;
inline constexpr size_t kMaxChunkBytes = size_t{4} << 20;      // one kChunk's bytes
inline constexpr size_t kMaxManifestBytes = size_t{64} << 20;  // ~1M shard lines
inline constexpr size_t kMaxReasonBytes = 4096;
inline constexpr size_t kMaxFileNameBytes = 255;

enum class FetchKind : uint8_t {
  kManifestRequest = 1,
  kManifest = 2,
  kNoData = 3,
  kFileRequest = 4,
  kFileStart = 5,
  kChunk = 6,
  kRefused = 7,
  kStatusRequest = 8,
  kStatus = 9,
};
const char* FetchKindName(FetchKind kind);

struct FetchMessage {
  FetchKind kind = FetchKind::kManifestRequest;
  std::string file;            // kFileRequest, kFileStart, kChunk, kRefused
  std::string text;            // kManifest (manifest bytes), kNoData and kRefused (reason)
  uint64_t offset = 0;         // kFileRequest, kChunk
  uint64_t size = 0;           // kFileStart
  std::vector<uint8_t> bytes;  // kChunk
  bool complete = false;       // kStatus
  uint64_t have_bytes = 0;     // kStatus
  uint64_t total_bytes = 0;    // kStatus
};

std::vector<uint8_t> EncodeFetchMessage(const FetchMessage& m);
// The same for a chunk without building a FetchMessage (the bulk path): appends to *out.
void EncodeChunk(const std::string& file, uint64_t offset, absl::Span<const uint8_t> bytes,
                 std::vector<uint8_t>* out);
// Validates everything (see the file comment); errors name `peer`.
absl::StatusOr<FetchMessage> DecodeFetchMessage(absl::Span<const uint8_t> bytes,
                                                const std::string& peer);

}  // namespace rt::fetch
