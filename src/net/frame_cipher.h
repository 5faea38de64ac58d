// Frame keys and AES-256-GCM sealing (--encrypt): the cryptography of sealed links.
//
// Keys: HKDF-SHA256 (RFC 5869) with the shared secret as input key material, the two
// handshake nonces (dialer's, then acceptor's) as salt, and a label naming the
// direction as info, so every connection and each of its directions has its own key.
// Nonces: the 12-byte GCM nonce is 4 zero bytes and the frame's 64-bit sequence
// number (little-endian); sequences count up per direction and a connection never
// outlives 2^64 frames, so no (key, nonce) pair is used twice. The 48 header bytes
// are the additional authenticated data: a frame whose header, payload or tag was
// altered, that was replayed or reordered (another sequence: another nonce), or that
// was made without the key fails to open.
//
// Contract: a FrameSealer / FrameOpener is used by one thread at a time (the caller
// serialises); frame_codec.h is its only user besides tests and benchmarks.
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "net/frame.h"
#include "net/handshake.h"

namespace rt::net {

using FrameKey = std::array<uint8_t, 32>;
struct FrameKeys {
  FrameKey send{};
  FrameKey receive{};
};

// The keys of one end of a connection: `dialer` says which end this is.
FrameKeys DeriveFrameKeys(const std::string& secret, const Nonce& dialer_nonce,
                          const Nonce& acceptor_nonce, bool dialer);

class FrameSealer {
 public:
  explicit FrameSealer(const FrameKey& key);
  ~FrameSealer();
  FrameSealer(const FrameSealer&) = delete;
  FrameSealer& operator=(const FrameSealer&) = delete;
  // Encrypts n bytes of `in` into `out` (may be equal) and writes the tag, under the
  // nonce of `sequence` with the 48 `header` bytes as additional data.
  absl::Status Seal(uint64_t sequence, const uint8_t* header, const uint8_t* in, size_t n,
                    uint8_t* out, uint8_t* tag);

 private:
  EVP_CIPHER_CTX* ctx_;
};

// Opens one frame at a time, in pieces as its bytes arrive: Begin, Update (in place)
// as often as needed, Finish with the tag. Until Finish returned OK the plaintext
// is unauthenticated: callers drop it (and the link) on any error.
class FrameOpener {
 public:
  explicit FrameOpener(const FrameKey& key);
  ~FrameOpener();
  FrameOpener(const FrameOpener&) = delete;
  FrameOpener& operator=(const FrameOpener&) = delete;
  void Begin(uint64_t sequence, const uint8_t* header);
  void Update(uint8_t* bytes, size_t n);
  bool Finish(const uint8_t* tag);  // false: the frame is not authentic

 private:
  EVP_CIPHER_CTX* ctx_;
  bool failed_ = false;
};

}  // namespace rt::net
