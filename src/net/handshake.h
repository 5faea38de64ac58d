// Handshake messages: who is talking, proof of the shared secret, cluster fingerprint.
//
// Both ends of a new connection run the same three steps (each a frame, see frame.h):
//   1. hello:       handshake version, cluster id, rank, channel, role, 32-byte random nonce,
//                   whether the sender seals its links (--encrypt: peers that differ are
//                   refused at once, naming the flag and both values; the proof covers
//                   it, so it cannot be changed on the way),
//                   and the sender's own hosts-file endpoint ("10.0.0.2:29500"): peers are
//                   identified by endpoint (the proof covers it), so hosts files may grow
//                   at run time and ranks may differ between files;
//   2. proof:       HMAC-SHA256(secret, "ringtrain-auth-v1" | prover role | dialer hello |
//                   acceptor hello) — fresh (both nonces) and not reflectable (role);
//   3. fingerprint: the caller's (key, value) list (model config, optimizer, data, ...),
//                   sent only after the peer's proof verified, so it doubles as the
//                   "you are accepted" acknowledgement. On sealed links (frame_cipher.h)
//                   it is the first sealed frame each way.
// A peer whose proof fails or whose fingerprint differs is refused on both sides; the
// error names the differing keys with both values. The host list is not part of the
// fingerprint (users grow and shrink jobs by editing it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "net/hosts_file.h"

namespace rt::net {

inline constexpr uint16_t kHandshakeVersion = 3;  // 2: hello carries the endpoint; 3: encrypt
using Nonce = std::array<uint8_t, 32>;
using Proof = std::array<uint8_t, 32>;
// Ordered (key, value) pairs; keys unique.
using Fingerprint = std::vector<std::pair<std::string, std::string>>;

struct Hello {
  uint16_t version = kHandshakeVersion;
  std::string cluster_id;
  int32_t rank = -1;     // the sender's rank in its own hosts file (informational)
  std::string endpoint;  // the sender's hosts-file entry, HostEntry::Endpoint()
  uint64_t channel = 0;  // which link this is (e.g. a ring id), chosen by the dialer
  bool dialer = false;
  bool encrypt = false;  // the sender's links are sealed (--encrypt resolved to on)
  Nonce nonce{};
};

std::vector<uint8_t> EncodeHello(const Hello& hello);
absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> bytes, const std::string& peer);
Nonce RandomNonce();  // from OpenSSL RAND_bytes

Proof ComputeProof(const std::string& secret, bool prover_is_dialer,
                   absl::Span<const uint8_t> dialer_hello,
                   absl::Span<const uint8_t> acceptor_hello);
bool ProofEquals(absl::Span<const uint8_t> a, const Proof& b);  // constant time

std::vector<uint8_t> EncodeFingerprint(const Fingerprint& fp);
absl::StatusOr<Fingerprint> DecodeFingerprint(absl::Span<const uint8_t> bytes,
                                              const std::string& peer);
// Every differing or missing key with both values, "; "-separated, "" if equal:
// "lr: here '0.001', there '0.002'; tokenizer: here missing, there 't1'". A value made of
// key=value tokens with the same keys on both sides names the tokens that differ:
// "model layers: here '2', there '3'" (for 'layers=2 heads=4' against 'layers=3 heads=4').
std::string FingerprintDifference(const Fingerprint& ours, const Fingerprint& theirs);
// The start of CompareFingerprints' message (TcpNode logs each difference once).
inline constexpr char kFingerprintDiffers[] = "cluster fingerprint differs";
// OK if equal; else FailedPrecondition with FingerprintDifference:
// "cluster fingerprint differs from rank 1 (...): model layers: here '2', there '3'".
absl::Status CompareFingerprints(const Fingerprint& ours, const Fingerprint& theirs,
                                 const std::string& peer);

// The shared secret: contents of `secret_file` (trailing whitespace dropped) if given,
// else $RINGTRAIN_SECRET, else "" — allowed only when every host is loopback and the
// links are not sealed (`encrypt`: keys are derived from the secret).
absl::StatusOr<std::string> LoadSharedSecret(const std::string& secret_file,
                                             const std::vector<HostEntry>& hosts,
                                             bool encrypt = false);

// --encrypt auto|on|off: whether links are sealed. auto is on unless every host of the
// hosts file is loopback. InvalidArgument for another value.
absl::StatusOr<bool> ResolveEncrypt(const std::string& flag, const std::vector<HostEntry>& hosts);
inline const char* EncryptName(bool encrypt) { return encrypt ? "on" : "off"; }

}  // namespace rt::net
