// OutgoingFrames / IncomingFrames: stamping, sealing, opening and checking frames
// (contract in frame_codec.h).
#include "net/frame_codec.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace rt::net {

absl::StatusOr<FrameHeader> OutgoingFrames::Encode(FrameType type, uint8_t codec,
                                                   absl::Span<const uint8_t> payload,
                                                   const uint32_t* crc32c, uint8_t* header_out,
                                                   std::vector<uint8_t>* sealed) {
  FrameHeader h;
  h.type = type;
  h.codec = codec;
  h.epoch = epoch_;
  h.step = step_;
  h.payload_bytes = payload.size();
  h.sequence = next_sequence_;
  const bool seal = NextIsSealed();
  if (!seal) h.payload_crc32c = crc32c ? *crc32c : Crc32c(payload.data(), payload.size());
  EncodeFrameHeader(h, header_out);
  if (seal) {
    // resize() keeps a recycled buffer's bytes: no zero-fill when sizes repeat. A fresh
    // buffer gets 1/16 slack: a ring's chunks differ by a few bytes, and growing past
    // the capacity would copy the whole buffer.
    const size_t n = payload.size() + kFrameTagBytes;
    if (sealed->capacity() < n) sealed->reserve(n + n / 16);
    sealed->resize(n);
    absl::Status st = sealer_->Seal(h.sequence, header_out, payload.data(), payload.size(),
                                    sealed->data(), sealed->data() + payload.size());
    if (!st.ok()) return st;
  }
  ++next_sequence_;
  return h;
}

absl::StatusOr<FrameHeader> IncomingFrames::Begin(const uint8_t* header_bytes) {
  absl::StatusOr<FrameHeader> h = DecodeFrameHeader(header_bytes, limits_, peer_);
  if (!h.ok()) return h.status();
  absl::Status st = CheckFramePosition(h->type, h->sequence, established_, peer_);
  if (!st.ok()) return st;
  st = order_.Check(*h);
  if (!st.ok()) return st;
  header_ = *h;
  frame_sealed_ = opener_ != nullptr && h->sequence >= kFirstSealedSequence;
  crc_ = 0;
  taken_ = 0;
  if (frame_sealed_) opener_->Begin(h->sequence, header_bytes);
  return h;
}

void IncomingFrames::TakePayload(uint8_t* bytes, size_t n) {
  if (frame_sealed_) {
    opener_->Update(bytes, n);
  } else {
    crc_ = Crc32cExtend(crc_, bytes, n);
  }
  taken_ += n;
}

absl::Status IncomingFrames::Finish() {
  if (taken_ != header_.payload_bytes) {
    return absl::DataLossError(absl::StrFormat("%s frame %d from %s is truncated: %d of %d bytes",
                                               FrameTypeName(header_.type), header_.sequence, peer_,
                                               taken_, header_.payload_bytes));
  }
  if (frame_sealed_) {
    if (opener_->Finish(tag_.data())) return absl::OkStatus();
    return absl::DataLossError(absl::StrFormat(
        "%s frame %d from %s failed authentication (altered, replayed or forged on the way, or "
        "sealed under another key): closing the link",
        FrameTypeName(header_.type), header_.sequence, peer_));
  }
  if (crc_ != header_.payload_crc32c) {
    return absl::DataLossError(absl::StrFormat(
        "%s frame %d from %s has a corrupt payload (checksum 0x%08x, computed 0x%08x)",
        FrameTypeName(header_.type), header_.sequence, peer_, header_.payload_crc32c, crc_));
  }
  return absl::OkStatus();
}

}  // namespace rt::net
