// The wire messages of a state transfer (state_transfer.h): encoding and strict
// decoding, apart from the links that carry them so that they can be tested (and
// fuzzed) on bytes alone.
//
// Encoding (little-endian): magic u32 'RTST' | type u8 | the message's fields:
//   1 Request      want.epoch u64 | want.step i64
//   2 Manifest     ok u8 (0/1) | reason str | if ok: version.epoch u64 | version.step i64 |
//                  chunk_bytes u32 | count u32 | count x (name str | bytes u64 | crc32c u32)
//   3 ChunkHeader  section u32 | offset u64 | bytes u32 | crc32c u32
//   4 Ack          ok u8 (0/1) | reason str
// Strings are u32 length + bytes. Decoding refuses another type than the one asked for,
// truncation, trailing bytes, bools other than 0/1, over-long strings, a manifest with
// chunk_bytes 0, more than kMaxStateSections sections, an empty or repeated section
// name, or a total over max_total_bytes (ResourceExhausted); everything else is
// DataLoss naming `where`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cluster/step_agreement.h"

namespace rt::cluster {

inline constexpr uint32_t kStateMessageMagic = 0x54535452u;  // "RTST" in memory order
inline constexpr size_t kMaxStateSections = 4096;
inline constexpr size_t kMaxStateSectionName = 256;
inline constexpr size_t kMaxStateReason = 4096;

struct StateRequest {
  StateVersion want;
};
struct StateManifestEntry {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;  // of the whole section
};
struct StateManifest {
  bool ok = false;
  std::string reason;  // why the source refuses (ok = false); "" otherwise
  // The rest only when ok.
  StateVersion version;
  uint32_t chunk_bytes = 0;
  std::vector<StateManifestEntry> sections;
};
struct StateChunkHeader {
  uint32_t section = 0;
  uint64_t offset = 0;
  uint32_t bytes = 0;
  uint32_t crc32c = 0;  // of this chunk
};
struct StateAck {
  bool ok = false;
  std::string reason;
};

// Reasons longer than kMaxStateReason are cut there.
std::vector<uint8_t> EncodeStateRequest(const StateRequest& m);
std::vector<uint8_t> EncodeStateManifest(const StateManifest& m);
std::vector<uint8_t> EncodeStateChunkHeader(const StateChunkHeader& m);
std::vector<uint8_t> EncodeStateAck(const StateAck& m);

absl::StatusOr<StateRequest> DecodeStateRequest(absl::Span<const uint8_t> bytes,
                                                const std::string& where);
absl::StatusOr<StateManifest> DecodeStateManifest(absl::Span<const uint8_t> bytes,
                                                  uint64_t max_total_bytes,
                                                  const std::string& where);
absl::StatusOr<StateChunkHeader> DecodeStateChunkHeader(absl::Span<const uint8_t> bytes,
                                                        const std::string& where);
absl::StatusOr<StateAck> DecodeStateAck(absl::Span<const uint8_t> bytes, const std::string& where);

}  // namespace rt::cluster
