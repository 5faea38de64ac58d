// Wire frames: a fixed 48-byte header followed by a payload (DESIGN "Wire").
//
// Header layout (little-endian, 48 bytes):
//   0  magic u32 = 'RTF1' (0x31465452)    4  version u16 = kWireVersion   6  type u8   7  codec u8
//   8  epoch u64                         16  step u64                     24  sequence u64
//  32  payload_bytes u64                 40  payload_crc32c u32           44  header_crc32c u32
// header_crc32c covers bytes 0..43. Sequence numbers count frames per connection and
// direction from 0 (handshake frames included), so a lost, repeated or reordered frame
// is detected. Frames of an epoch older than the receiver's current epoch are refused.
// The handshake frames sit at fixed sequence numbers (hello 0, proof 1, fingerprint 2;
// an error frame may take any place), and every type has its own payload limit
// (FrameLimits), checked when the header arrives, before anything is allocated.
//
// Sealed frames (--encrypt, frame_codec.h): from sequence kFirstSealedSequence on, the
// payload is AES-256-GCM ciphertext of the same length, followed by a 16-byte tag that
// payload_bytes does not count; payload_crc32c is 0 (the tag covers the payload) and
// the 48 header bytes are the additional authenticated data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::net {

inline constexpr uint32_t kFrameMagic = 0x31465452u;  // "RTF1" in memory order
// Version 2: the link probe's streams grow until one lasts long enough (a receiver
// asks for up to 8 per direction, version 1 senders answered exactly 2), so peers of
// versions 1 and 2 would fail in the probe; they fail at their first frame instead.
// Version 3: a link probe's pair starts with both peers' matrix digests (links measured
// together before are not probed again), so version 2 peers would fail in the probe.
// Version 4: round sync with --balance on gathers every peer's balance figures after
// each outer step (train/round_balancer.h), a collective version 3 peers do not take
// part in.
inline constexpr uint16_t kWireVersion = 4;
inline constexpr size_t kFrameHeaderBytes = 48;
inline constexpr uint64_t kDefaultMaxPayloadBytes = 256ull << 20;  // 256 MiB (data frames)
inline constexpr size_t kFrameTagBytes = 16;         // AES-GCM tag after a sealed payload
inline constexpr uint64_t kFirstSealedSequence = 2;  // the fingerprint, on sealed links

enum class FrameType : uint8_t {
  kHello = 1,        // handshake: version, cluster id, rank, channel, nonce
  kProof = 2,        // handshake: HMAC-SHA256 over both hellos
  kFingerprint = 3,  // handshake: cluster fingerprint (key/value list)
  kError = 4,        // a human-readable reason, sent before closing a link
  kData = 5,         // collective payload (RingTransport messages)
  kControl = 6,      // small control messages (membership, heartbeats, probes)
};
const char* FrameTypeName(FrameType type);
bool IsKnownFrameType(uint8_t type);

// Payload limits per frame type. Handshake frames are tiny (a stranger must not make us
// allocate more), control messages (membership, state-transfer manifests, status
// answers) small; only data frames carry bulk bytes.
struct FrameLimits {
  uint64_t hello_bytes = 4 << 10;         // ~100 bytes + cluster id + endpoint
  uint64_t proof_bytes = 256;             // 32 bytes
  uint64_t fingerprint_bytes = 64 << 10;  // the configuration key/value list
  uint64_t error_bytes = 16 << 10;        // a human-readable reason
  uint64_t control_bytes = 1 << 20;       // largest legit: a status answer (~300 B per peer)
  uint64_t data_bytes = kDefaultMaxPayloadBytes;
  uint64_t For(FrameType type) const;
};

// The frame types allowed at `sequence`: before the handshake completed, hello at 0,
// proof at 1, fingerprint at 2; after it, data and control; error frames anywhere.
// InvalidArgument / FailedPrecondition naming `peer` otherwise.
absl::Status CheckFramePosition(FrameType type, uint64_t sequence, bool established,
                                const std::string& peer);

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint8_t codec = 0;  // opaque to net/: the collective layer's codec id
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t sequence = 0;
  uint64_t payload_bytes = 0;
  uint32_t payload_crc32c = 0;
};

// Writes the 48 header bytes (computing header_crc32c) into out[0..47].
void EncodeFrameHeader(const FrameHeader& header, uint8_t* out);

// Validates magic, version, header checksum, type and the payload bound; `peer`
// names the sender in errors ("rank 1 (10.0.0.2:29500)"). DataLoss / InvalidArgument /
// ResourceExhausted (oversized) on violations.
absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* bytes, uint64_t max_payload_bytes,
                                              const std::string& peer);
// The same with the limit of the frame's own type.
absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* bytes, const FrameLimits& limits,
                                              const std::string& peer);

// Checks a received payload against header.payload_crc32c.
absl::Status VerifyFramePayload(const FrameHeader& header, absl::Span<const uint8_t> payload,
                                const std::string& peer);

// Per-connection receive-order rules: sequence must be exactly the next one, epoch
// must not be older than the current one. One instance per receiving direction.
class FrameOrderChecker {
 public:
  explicit FrameOrderChecker(std::string peer) : peer_(std::move(peer)) {}
  absl::Status Check(const FrameHeader& header);  // advances the expected sequence on OK
  void set_min_epoch(uint64_t epoch) { min_epoch_ = epoch; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  uint64_t min_epoch() const { return min_epoch_; }
  uint64_t next_sequence() const { return next_sequence_; }

 private:
  std::string peer_;
  uint64_t next_sequence_ = 0;
  uint64_t min_epoch_ = 0;
};

// Whole frames in memory (tests, small control messages). EncodeFrame fills the
// payload checksum and payload_bytes itself.
std::vector<uint8_t> EncodeFrame(FrameHeader header, absl::Span<const uint8_t> payload);
struct DecodedFrame {
  FrameHeader header;
  absl::Span<const uint8_t> payload;  // points into the decoded buffer
  size_t frame_bytes = 0;             // header + payload
};
// Decodes the first frame of `bytes`; refuses truncated input (header or payload
// shorter than announced) and everything DecodeFrameHeader / VerifyFramePayload refuse.
absl::StatusOr<DecodedFrame> DecodeFrame(absl::Span<const uint8_t> bytes,
                                         uint64_t max_payload_bytes, const std::string& peer);

}  // namespace rt::net
