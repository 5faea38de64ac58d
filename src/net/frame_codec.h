// The frame codec of one connection: the one place where messages become frame bytes
// and frame bytes become messages (headers, sequence numbers, epochs and steps,
// per-type limits, handshake positions, crc32c on plain links, AES-256-GCM on sealed
// ones). TcpConnection's I/O engines (Asio during the handshake, blocking threads
// after it) only move the bytes this codec produces and hands back.
//
// A link is sealed once SetKeys() was called (the handshake does so when --encrypt is
// on, right after the peer's hello): from frame kFirstSealedSequence on, in each
// direction, every frame is sealed (frame.h, frame_cipher.h). Plain links keep the
// crc32c of each payload.
//
// Threads: OutgoingFrames is used under the connection's send lock (one sender at a
// time); IncomingFrames by whichever thread reads the socket (the io thread, then the
// reader thread; never both at once).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/frame.h"
#include "net/frame_cipher.h"

namespace rt::net {

class OutgoingFrames {
 public:
  // From now on frames from kFirstSealedSequence on are sealed under `key`.
  void SetKey(const FrameKey& key) { sealer_ = std::make_unique<FrameSealer>(key); }
  bool sealed() const { return sealer_ != nullptr; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  void set_step(uint64_t step) { step_ = step; }
  uint64_t epoch() const { return epoch_; }
  uint64_t step() const { return step_; }
  uint64_t next_sequence() const { return next_sequence_; }

  // Whether the next frame will be sealed (then Encode writes its bytes to `sealed`).
  bool NextIsSealed() const { return sealer_ != nullptr && next_sequence_ >= kFirstSealedSequence; }
  // Stamps the next sequence number, epoch and step and writes the 48 header bytes.
  // Plain frames: the payload goes on the wire as it is (crc32c: the caller's, or
  // computed here when null). Sealed frames: *sealed becomes ciphertext + tag
  // (payload.size() + kFrameTagBytes bytes; its capacity is reused). Returns the
  // stamped header.
  absl::StatusOr<FrameHeader> Encode(FrameType type, uint8_t codec,
                                     absl::Span<const uint8_t> payload, const uint32_t* crc32c,
                                     uint8_t* header_out, std::vector<uint8_t>* sealed);

 private:
  std::unique_ptr<FrameSealer> sealer_;
  uint64_t next_sequence_ = 0;
  uint64_t epoch_ = 0;
  uint64_t step_ = 0;
};

class IncomingFrames {
 public:
  IncomingFrames(std::string peer, const FrameLimits& limits)
      : peer_(std::move(peer)), limits_(limits), order_(peer_) {}
  void SetKey(const FrameKey& key) { opener_ = std::make_unique<FrameOpener>(key); }
  bool sealed() const { return opener_ != nullptr; }
  void set_peer(std::string peer) {
    peer_ = peer;
    order_.set_peer(std::move(peer));
  }
  void set_established() { established_ = true; }
  bool established() const { return established_; }
  void set_min_epoch(uint64_t epoch) { order_.set_min_epoch(epoch); }
  const FrameLimits& limits() const { return limits_; }

  // The 48 header bytes of the next frame: checks them (magic, version, checksum, the
  // type's limit, sequence, epoch, handshake position) and prepares the payload check.
  absl::StatusOr<FrameHeader> Begin(const uint8_t* header_bytes);
  // n payload bytes as they arrive, in order; on sealed frames decrypted in place.
  void TakePayload(uint8_t* bytes, size_t n);
  // Bytes after the payload (the tag of a sealed frame, else 0), to read into trailer().
  size_t trailer_bytes() const { return frame_sealed_ ? kFrameTagBytes : 0; }
  uint8_t* trailer() { return tag_.data(); }
  // After the whole payload and trailer: OK if the frame is intact and authentic.
  absl::Status Finish();
  const FrameHeader& header() const { return header_; }

 private:
  std::string peer_;
  const FrameLimits limits_;
  FrameOrderChecker order_;
  std::unique_ptr<FrameOpener> opener_;
  bool established_ = false;
  FrameHeader header_;
  bool frame_sealed_ = false;
  uint32_t crc_ = 0;
  uint64_t taken_ = 0;
  std::array<uint8_t, kFrameTagBytes> tag_{};
};

}  // namespace rt::net
