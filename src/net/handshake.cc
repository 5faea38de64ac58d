// Handshake message encoding, HMAC proofs, fingerprint comparison, secret loading.
#include "net/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rt::net {
namespace {

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(v); }
  void U16(uint16_t v) {
    for (int i = 0; i < 2; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  void Bytes(const uint8_t* p, size_t n) { out_.insert(out_.end(), p, p + n); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  Reader(absl::Span<const uint8_t> in) : in_(in) {}
  bool U8(uint8_t* v) { return Fixed(v); }
  bool U16(uint16_t* v) { return Fixed(v); }
  bool U32(uint32_t* v) { return Fixed(v); }
  bool U64(uint64_t* v) { return Fixed(v); }
  bool Bytes(uint8_t* p, size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::copy(in_.begin() + pos_, in_.begin() + pos_ + n, p);
    pos_ += n;
    return true;
  }
  bool Str(std::string* s, size_t max_len) {
    uint32_t n = 0;
    if (!U32(&n) || n > max_len || in_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(in_.data()) + pos_, n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  bool Fixed(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    T x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<T>(in_[pos_ + i]) << (8 * i);
    *v = x;
    pos_ += sizeof(T);
    return true;
  }
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
};

constexpr size_t kMaxString = 1 << 16;

}  // namespace

std::vector<uint8_t> EncodeHello(const Hello& h) {
  Writer w;
  w.U16(h.version);
  w.U32(static_cast<uint32_t>(h.rank));
  w.U64(h.channel);
  w.U8(h.dialer ? 1 : 0);
  w.U8(h.encrypt ? 1 : 0);
  w.Bytes(h.nonce.data(), h.nonce.size());
  w.Str(h.cluster_id);
  w.Str(h.endpoint);
  return w.Take();
}

absl::StatusOr<Hello> DecodeHello(absl::Span<const uint8_t> bytes, const std::string& peer) {
  Hello h;
  Reader r(bytes);
  uint32_t rank = 0;
  uint8_t dialer = 0, encrypt = 0;
  if (!r.U16(&h.version)) return absl::DataLossError("hello from " + peer + " is truncated");
  if (h.version != kHandshakeVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s speaks handshake version %d, this binary speaks %d: run the same ringtrain build "
        "everywhere",
        peer, h.version, kHandshakeVersion));
  }
  if (!r.U32(&rank) || !r.U64(&h.channel) || !r.U8(&dialer) || !r.U8(&encrypt) ||
      !r.Bytes(h.nonce.data(), h.nonce.size()) || !r.Str(&h.cluster_id, kMaxString) ||
      !r.Str(&h.endpoint, 300) || !r.AtEnd() || dialer > 1 || encrypt > 1) {
    return absl::DataLossError("malformed hello from " + peer);
  }
  h.rank = static_cast<int32_t>(rank);
  h.dialer = dialer == 1;
  h.encrypt = encrypt == 1;
  return h;
}

Nonce RandomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    std::random_device rd;  // OpenSSL's generator failed: still never reuse nonces
    for (auto& b : n) b = static_cast<uint8_t>(rd());
  }
  return n;
}

Proof ComputeProof(const std::string& secret, bool prover_is_dialer,
                   absl::Span<const uint8_t> dialer_hello,
                   absl::Span<const uint8_t> acceptor_hello) {
  Writer w;
  const std::string label = "ringtrain-auth-v1";
  w.Bytes(reinterpret_cast<const uint8_t*>(label.data()), label.size());
  w.U8(prover_is_dialer ? 1 : 2);
  w.U32(static_cast<uint32_t>(dialer_hello.size()));
  w.Bytes(dialer_hello.data(), dialer_hello.size());
  w.U32(static_cast<uint32_t>(acceptor_hello.size()));
  w.Bytes(acceptor_hello.data(), acceptor_hello.size());
  std::vector<uint8_t> msg = w.Take();
  Proof out{};
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&kEmpty) : secret.data();
  HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), msg.data(), msg.size(), out.data(),
       &len);
  return out;
}

bool ProofEquals(absl::Span<const uint8_t> a, const Proof& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), b.size()) == 0;
}

std::vector<uint8_t> EncodeFingerprint(const Fingerprint& fp) {
  Writer w;
  w.U32(static_cast<uint32_t>(fp.size()));
  for (const auto& [k, v] : fp) {
    w.Str(k);
    w.Str(v);
  }
  return w.Take();
}

absl::StatusOr<Fingerprint> DecodeFingerprint(absl::Span<const uint8_t> bytes,
                                              const std::string& peer) {
  Reader r(bytes);
  uint32_t n = 0;
  if (!r.U32(&n) || n > 4096) return absl::DataLossError("malformed fingerprint from " + peer);
  Fingerprint fp;
  for (uint32_t i = 0; i < n; ++i) {
    std::string k, v;
    if (!r.Str(&k, kMaxString) || !r.Str(&v, kMaxString)) {
      return absl::DataLossError("malformed fingerprint from " + peer);
    }
    fp.emplace_back(std::move(k), std::move(v));
  }
  if (!r.AtEnd()) return absl::DataLossError("malformed fingerprint from " + peer);
  return fp;
}

namespace {

// "layers=2 heads=4" as (key, value) tokens; false unless every token is key=value.
bool SplitSettings(const std::string& value,
                   std::vector<std::pair<std::string, std::string>>* out) {
  for (absl::string_view token : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    const size_t eq = token.find('=');
    if (eq == absl::string_view::npos || eq == 0) return false;
    out->emplace_back(std::string(token.substr(0, eq)), std::string(token.substr(eq + 1)));
  }
  return !out->empty();
}

// One differing key: compound values ("layers=2 heads=4") name the settings that
// differ ("model layers: here '2', there '3'"), others the whole values.
void AddDifference(const std::string& key, const std::string& here, const std::string& there,
                   std::vector<std::string>* diffs) {
  std::vector<std::pair<std::string, std::string>> a, b;
  bool same_keys = SplitSettings(here, &a) && SplitSettings(there, &b) && a.size() == b.size();
  for (size_t i = 0; same_keys && i < a.size(); ++i) same_keys = a[i].first == b[i].first;
  if (!same_keys) {
    diffs->push_back(absl::StrFormat("%s: here '%s', there '%s'", key, here, there));
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second == b[i].second) continue;
    diffs->push_back(
        absl::StrFormat("%s %s: here '%s', there '%s'", key, a[i].first, a[i].second, b[i].second));
  }
}

}  // namespace

std::string FingerprintDifference(const Fingerprint& ours, const Fingerprint& theirs) {
  std::map<std::string, std::string> a(ours.begin(), ours.end());
  std::map<std::string, std::string> b(theirs.begin(), theirs.end());
  std::vector<std::string> diffs;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) {
      diffs.push_back(absl::StrFormat("%s: here '%s', there missing", k, v));
    } else if (it->second != v) {
      AddDifference(k, v, it->second, &diffs);
    }
  }
  for (const auto& [k, v] : b) {
    if (a.count(k) == 0) diffs.push_back(absl::StrFormat("%s: here missing, there '%s'", k, v));
  }
  return absl::StrJoin(diffs, "; ");
}

absl::Status CompareFingerprints(const Fingerprint& ours, const Fingerprint& theirs,
                                 const std::string& peer) {
  const std::string diff = FingerprintDifference(ours, theirs);
  if (diff.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrFormat("%s from %s (every peer must run the same configuration): %s",
                      kFingerprintDiffers, peer, diff));
}

absl::StatusOr<bool> ResolveEncrypt(const std::string& flag, const std::vector<HostEntry>& hosts) {
  if (flag == "on") return true;
  if (flag == "off") return false;
  if (flag == "auto") return !AllLoopback(hosts);
  return absl::InvalidArgumentError("--encrypt must be auto, on or off, got '" + flag + "'");
}

absl::StatusOr<std::string> LoadSharedSecret(const std::string& secret_file,
                                             const std::vector<HostEntry>& hosts, bool encrypt) {
  std::string secret;
  std::string source;
  if (!secret_file.empty()) {
    std::ifstream in(secret_file, std::ios::binary);
    if (!in) return absl::NotFoundError("cannot read --secret-file '" + secret_file + "'");
    std::stringstream s;
    s << in.rdbuf();
    secret = std::string(absl::StripTrailingAsciiWhitespace(s.str()));
    source = "--secret-file " + secret_file;
    if (secret.empty()) return absl::InvalidArgumentError(source + " is empty");
  } else if (const char* env = std::getenv("RINGTRAIN_SECRET")) {
    secret = env;
    source = "RINGTRAIN_SECRET";
    if (secret.empty()) return absl::InvalidArgumentError("RINGTRAIN_SECRET is set but empty");
  }
  if (secret.empty() && encrypt) {
    return absl::FailedPreconditionError(
        "--encrypt on needs a shared secret (the frame keys are derived from it): pass "
        "--secret-file FILE (same file on every host) or set RINGTRAIN_SECRET");
  }
  if (secret.empty() && !AllLoopback(hosts)) {
    return absl::FailedPreconditionError(
        "a shared secret is required when peers are not all on loopback: pass --secret-file "
        "FILE (same file on every host) or set RINGTRAIN_SECRET");
  }
  if (!secret.empty() && secret.size() < 16) {
    return absl::InvalidArgumentError(
        source +
        " is shorter than 16 characters: use a long random secret, e.g. `openssl rand "
        "-hex 32`");
  }
  return secret;
}

}  // namespace rt::net
