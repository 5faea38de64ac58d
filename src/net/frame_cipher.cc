// HKDF-SHA256 frame keys and AES-256-GCM through OpenSSL EVP (format in frame_cipher.h).
#include "net/frame_cipher.h"

#include <openssl/crypto.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"

namespace rt::net {
namespace {

constexpr size_t kIvBytes = 12;

std::array<uint8_t, kIvBytes> IvOf(uint64_t sequence) {
  std::array<uint8_t, kIvBytes> iv{};
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(sequence >> (8 * i));
  return iv;
}

FrameKey Hkdf(const std::string& secret, const std::vector<uint8_t>& salt,
              const std::string& info) {
  FrameKey key{};
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr);
  size_t len = key.size();
  // HKDF accepts empty key material, but OpenSSL wants a non-null pointer.
  static const unsigned char kEmpty = 0;
  const unsigned char* ikm =
      secret.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(secret.data());
  const bool ok =
      ctx != nullptr && EVP_PKEY_derive_init(ctx) == 1 &&
      EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 &&
      EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt.data(), static_cast<int>(salt.size())) == 1 &&
      EVP_PKEY_CTX_set1_hkdf_key(ctx, ikm, static_cast<int>(secret.size())) == 1 &&
      EVP_PKEY_CTX_add1_hkdf_info(ctx, reinterpret_cast<const unsigned char*>(info.data()),
                                  static_cast<int>(info.size())) == 1 &&
      EVP_PKEY_derive(ctx, key.data(), &len) == 1 && len == key.size();
  EVP_PKEY_CTX_free(ctx);
  if (!ok) {
    // Without keys no frame could be sealed safely: this is a broken OpenSSL install.
    std::fprintf(stderr, "ringtrain: OpenSSL HKDF-SHA256 failed; cannot derive frame keys\n");
    std::abort();
  }
  return key;
}

EVP_CIPHER_CTX* NewGcm(const FrameKey& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const bool ok = ctx != nullptr &&
                  EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr,
                                    encrypt ? 1 : 0) == 1 &&
                  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, kIvBytes, nullptr) == 1;
  if (!ok) {
    std::fprintf(stderr, "ringtrain: OpenSSL AES-256-GCM is unavailable\n");
    std::abort();
  }
  return ctx;
}

}  // namespace

FrameKeys DeriveFrameKeys(const std::string& secret, const Nonce& dialer_nonce,
                          const Nonce& acceptor_nonce, bool dialer) {
  std::vector<uint8_t> salt(dialer_nonce.begin(), dialer_nonce.end());
  salt.insert(salt.end(), acceptor_nonce.begin(), acceptor_nonce.end());
  const FrameKey to_acceptor = Hkdf(secret, salt, "ringtrain-frames-v1 dialer->acceptor");
  const FrameKey to_dialer = Hkdf(secret, salt, "ringtrain-frames-v1 acceptor->dialer");
  FrameKeys keys;
  keys.send = dialer ? to_acceptor : to_dialer;
  keys.receive = dialer ? to_dialer : to_acceptor;
  return keys;
}

FrameSealer::FrameSealer(const FrameKey& key) : ctx_(NewGcm(key, true)) {}
FrameSealer::~FrameSealer() { EVP_CIPHER_CTX_free(ctx_); }

absl::Status FrameSealer::Seal(uint64_t sequence, const uint8_t* header, const uint8_t* in,
                               size_t n, uint8_t* out, uint8_t* tag) {
  const auto iv = IvOf(sequence);
  int len = 0;
  bool ok = EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv.data()) == 1 &&
            EVP_EncryptUpdate(ctx_, nullptr, &len, header, kFrameHeaderBytes) == 1;
  // EVP lengths are ints: feed big payloads in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t done = 0; ok && done < n; done += kPiece) {
    const int piece = static_cast<int>(std::min(kPiece, n - done));
    ok = EVP_EncryptUpdate(ctx_, out + done, &len, in + done, piece) == 1;
  }
  ok = ok && EVP_EncryptFinal_ex(ctx_, out + n, &len) == 1 &&
       EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kFrameTagBytes, tag) == 1;
  if (!ok) return absl::InternalError(absl::StrFormat("sealing frame %d failed", sequence));
  return absl::OkStatus();
}

FrameOpener::FrameOpener(const FrameKey& key) : ctx_(NewGcm(key, false)) {}
FrameOpener::~FrameOpener() { EVP_CIPHER_CTX_free(ctx_); }

void FrameOpener::Begin(uint64_t sequence, const uint8_t* header) {
  const auto iv = IvOf(sequence);
  int len = 0;
  failed_ = EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv.data()) != 1 ||
            EVP_DecryptUpdate(ctx_, nullptr, &len, header, kFrameHeaderBytes) != 1;
}

void FrameOpener::Update(uint8_t* bytes, size_t n) {
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t done = 0; !failed_ && done < n; done += kPiece) {
    int len = 0;
    const int piece = static_cast<int>(std::min(kPiece, n - done));
    failed_ = EVP_DecryptUpdate(ctx_, bytes + done, &len, bytes + done, piece) != 1;
  }
}

bool FrameOpener::Finish(const uint8_t* tag) {
  if (failed_) return false;
  uint8_t copy[kFrameTagBytes];
  std::memcpy(copy, tag, sizeof(copy));
  int len = 0;
  uint8_t scratch[32];
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kFrameTagBytes, copy) == 1 &&
         EVP_DecryptFinal_ex(ctx_, scratch, &len) == 1;
}

}  // namespace rt::net
