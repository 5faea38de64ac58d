// Frame header encoding, validation and receive-order checks (format in frame.h).
#include "net/frame.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace rt::net {
namespace {

template <typename T>
void Put(uint8_t* out, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[offset + i] = static_cast<uint8_t>(value >> (8 * i));
}
template <typename T>
T Get(const uint8_t* in, size_t offset) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(in[offset + i]) << (8 * i);
  return value;
}

}  // namespace

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kProof:
      return "proof";
    case FrameType::kFingerprint:
      return "fingerprint";
    case FrameType::kError:
      return "error";
    case FrameType::kData:
      return "data";
    case FrameType::kControl:
      return "control";
  }
  return "unknown";
}

bool IsKnownFrameType(uint8_t type) {
  return type >= static_cast<uint8_t>(FrameType::kHello) &&
         type <= static_cast<uint8_t>(FrameType::kControl);
}

uint64_t FrameLimits::For(FrameType type) const {
  switch (type) {
    case FrameType::kHello:
      return hello_bytes;
    case FrameType::kProof:
      return proof_bytes;
    case FrameType::kFingerprint:
      return fingerprint_bytes;
    case FrameType::kError:
      return error_bytes;
    case FrameType::kData:
      return data_bytes;
    case FrameType::kControl:
      return control_bytes;
  }
  return 0;
}

absl::Status CheckFramePosition(FrameType t, uint64_t sequence, bool established,
                                const std::string& peer) {
  if (t == FrameType::kError) return absl::OkStatus();
  if (established) {
    if (t == FrameType::kData || t == FrameType::kControl) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrFormat("%s sent a %s frame after the handshake", peer, FrameTypeName(t)));
  }
  const FrameType want = sequence == 0   ? FrameType::kHello
                         : sequence == 1 ? FrameType::kProof
                                         : FrameType::kFingerprint;
  if (t == want && sequence <= 2) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s sent a %s frame as frame %d, before completing the handshake", peer,
                      FrameTypeName(t), sequence));
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t* out) {
  Put<uint32_t>(out, 0, kFrameMagic);
  Put<uint16_t>(out, 4, kWireVersion);
  out[6] = static_cast<uint8_t>(h.type);
  out[7] = h.codec;
  Put<uint64_t>(out, 8, h.epoch);
  Put<uint64_t>(out, 16, h.step);
  Put<uint64_t>(out, 24, h.sequence);
  Put<uint64_t>(out, 32, h.payload_bytes);
  Put<uint32_t>(out, 40, h.payload_crc32c);
  Put<uint32_t>(out, 44, Crc32c(out, 44));
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* in, uint64_t max_payload_bytes,
                                              const std::string& peer) {
  uint32_t magic = Get<uint32_t>(in, 0);
  if (magic != kFrameMagic) {
    return absl::DataLossError(absl::StrFormat(
        "frame from %s has wrong magic 0x%08x (expected 0x%08x): not a ringtrain peer or "
        "stream out of sync",
        peer, magic, kFrameMagic));
  }
  uint16_t version = Get<uint16_t>(in, 4);
  if (version != kWireVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "frame from %s has wire version %d, this binary speaks version %d: run the same "
        "ringtrain build on every host",
        peer, version, kWireVersion));
  }
  uint32_t want_crc = Get<uint32_t>(in, 44);
  uint32_t got_crc = Crc32c(in, 44);
  if (want_crc != got_crc) {
    return absl::DataLossError(
        absl::StrFormat("frame header from %s is corrupt (header checksum 0x%08x, computed 0x%08x)",
                        peer, want_crc, got_crc));
  }
  if (!IsKnownFrameType(in[6])) {
    return absl::InvalidArgumentError(
        absl::StrFormat("frame from %s has unknown type %d", peer, in[6]));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(in[6]);
  h.codec = in[7];
  h.epoch = Get<uint64_t>(in, 8);
  h.step = Get<uint64_t>(in, 16);
  h.sequence = Get<uint64_t>(in, 24);
  h.payload_bytes = Get<uint64_t>(in, 32);
  h.payload_crc32c = Get<uint32_t>(in, 40);
  if (h.payload_bytes > max_payload_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s frame from %s announces %d payload bytes, more than the limit of %d",
                        FrameTypeName(h.type), peer, h.payload_bytes, max_payload_bytes));
  }
  return h;
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const uint8_t* in, const FrameLimits& limits,
                                              const std::string& peer) {
  // An unknown type is refused by the full decode, whatever the limit.
  const uint64_t limit =
      IsKnownFrameType(in[6]) ? limits.For(static_cast<FrameType>(in[6])) : UINT64_MAX;
  return DecodeFrameHeader(in, limit, peer);
}

absl::Status VerifyFramePayload(const FrameHeader& header, absl::Span<const uint8_t> payload,
                                const std::string& peer) {
  if (payload.size() != header.payload_bytes) {
    return absl::DataLossError(absl::StrFormat("%s frame %d from %s is truncated: %d of %d bytes",
                                               FrameTypeName(header.type), header.sequence, peer,
                                               payload.size(), header.payload_bytes));
  }
  uint32_t crc = Crc32c(payload.data(), payload.size());
  if (crc != header.payload_crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "%s frame %d from %s has a corrupt payload (checksum 0x%08x, computed 0x%08x)",
        FrameTypeName(header.type), header.sequence, peer, header.payload_crc32c, crc));
  }
  return absl::OkStatus();
}

absl::Status FrameOrderChecker::Check(const FrameHeader& header) {
  if (header.sequence != next_sequence_) {
    return absl::DataLossError(
        absl::StrFormat("%s frame from %s is out of sequence: got %d, expected %d",
                        FrameTypeName(header.type), peer_, header.sequence, next_sequence_));
  }
  if (header.epoch < min_epoch_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s frame from %s belongs to epoch %d, older than the current epoch %d",
                        FrameTypeName(header.type), peer_, header.epoch, min_epoch_));
  }
  ++next_sequence_;
  return absl::OkStatus();
}

std::vector<uint8_t> EncodeFrame(FrameHeader header, absl::Span<const uint8_t> payload) {
  header.payload_bytes = payload.size();
  header.payload_crc32c = Crc32c(payload.data(), payload.size());
  std::vector<uint8_t> out(kFrameHeaderBytes + payload.size());
  EncodeFrameHeader(header, out.data());
  if (!payload.empty()) std::memcpy(out.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return out;
}

absl::StatusOr<DecodedFrame> DecodeFrame(absl::Span<const uint8_t> bytes,
                                         uint64_t max_payload_bytes, const std::string& peer) {
  if (bytes.size() < kFrameHeaderBytes) {
    return absl::DataLossError(
        absl::StrFormat("frame from %s is truncated: %d bytes, a header alone is %d", peer,
                        bytes.size(), kFrameHeaderBytes));
  }
  DecodedFrame frame;
  auto header = DecodeFrameHeader(bytes.data(), max_payload_bytes, peer);
  if (!header.ok()) return header.status();
  frame.header = *header;
  uint64_t available = bytes.size() - kFrameHeaderBytes;
  uint64_t take = std::min<uint64_t>(available, frame.header.payload_bytes);
  frame.payload = bytes.subspan(kFrameHeaderBytes, take);
  auto st = VerifyFramePayload(frame.header, frame.payload, peer);
  if (!st.ok()) return st;
  frame.frame_bytes = kFrameHeaderBytes + take;
  return frame;
}

}  // namespace rt::net
