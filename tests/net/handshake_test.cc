// Handshake pieces: hello round trip, proofs, fingerprint comparison, secret loading.
#include "net/handshake.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("handshake: hello round trip and malformed hello") {
  rt::net::Hello h;
  h.cluster_id = "job-7";
  h.rank = 3;
  h.endpoint = "[::1]:29503";
  h.channel = 42;
  h.dialer = true;
  h.nonce = rt::net::RandomNonce();
  auto bytes = rt::net::EncodeHello(h);
  auto back = rt::net::DecodeHello(bytes, "peer");
  REQUIRE(back.ok());
  CHECK(back->cluster_id == "job-7");
  CHECK(back->rank == 3);
  CHECK(back->endpoint == "[::1]:29503");
  CHECK(back->channel == 42);
  CHECK(back->dialer);
  CHECK(back->nonce == h.nonce);
  bytes.pop_back();
  CHECK_FALSE(rt::net::DecodeHello(bytes, "peer").ok());
  bytes[0] = 9;  // handshake version
  auto v = rt::net::DecodeHello(bytes, "peer");
  REQUIRE_FALSE(v.ok());
  CHECK(Contains(v.status(), "handshake version 9"));
  CHECK(rt::net::RandomNonce() != rt::net::RandomNonce());
}

TEST_CASE("handshake: proofs depend on secret, role and both hellos") {
  std::vector<uint8_t> a = {1, 2, 3}, b = {4, 5, 6};
  auto p = rt::net::ComputeProof("secret-one-0123456", true, a, b);
  CHECK(rt::net::ProofEquals(p, rt::net::ComputeProof("secret-one-0123456", true, a, b)));
  CHECK_FALSE(rt::net::ProofEquals(p, rt::net::ComputeProof("secret-two-0123456", true, a, b)));
  CHECK_FALSE(rt::net::ProofEquals(p, rt::net::ComputeProof("secret-one-0123456", false, a, b)));
  CHECK_FALSE(rt::net::ProofEquals(p, rt::net::ComputeProof("secret-one-0123456", true, b, a)));
  CHECK_FALSE(rt::net::ProofEquals(absl::MakeConstSpan(p.data(), 31), p));
}

TEST_CASE("handshake: fingerprint comparison names differing keys with both values") {
  rt::net::Fingerprint ours = {{"model", "layers=6"}, {"optimizer", "lr=6e-4"}, {"data", "aa"}};
  rt::net::Fingerprint theirs = {{"data", "aa"}, {"model", "layers=12"}, {"tokenizer", "t1"}};
  auto bytes = rt::net::EncodeFingerprint(theirs);
  auto decoded = rt::net::DecodeFingerprint(bytes, "rank 1");
  REQUIRE(decoded.ok());
  CHECK(*decoded == theirs);
  CHECK(rt::net::CompareFingerprints(ours, ours, "rank 1").ok());
  auto st = rt::net::CompareFingerprints(ours, *decoded, "rank 1");
  REQUIRE_FALSE(st.ok());
  CHECK(Contains(st, "rank 1"));
  CHECK(Contains(st, "model layers: here '6', there '12'"));
  CHECK(Contains(st, "optimizer: here 'lr=6e-4', there missing"));
  CHECK(Contains(st, "tokenizer: here missing, there 't1'"));
  CHECK_FALSE(Contains(st, "data:"));
  // Compound values name only the settings that differ; others are quoted whole.
  CHECK(rt::net::FingerprintDifference({{"model", "layers=2 heads=4 dim=64"}},
                                       {{"model", "layers=3 heads=4 dim=32"}}) ==
        "model layers: here '2', there '3'; model dim: here '64', there '32'");
  CHECK(rt::net::FingerprintDifference({{"model", "layers=2 heads=4"}}, {{"model", "layers=2"}}) ==
        "model: here 'layers=2 heads=4', there 'layers=2'");
  CHECK(rt::net::FingerprintDifference({{"balance", "--balance on"}},
                                       {{"balance", "--balance off"}}) ==
        "balance: here '--balance on', there '--balance off'");
  CHECK(rt::net::FingerprintDifference(ours, ours).empty());
  bytes.resize(bytes.size() - 2);
  CHECK_FALSE(rt::net::DecodeFingerprint(bytes, "rank 1").ok());
}

TEST_CASE("handshake: shared secret sources and requirement") {
  auto loopback = rt::net::ParseHostsText("127.0.0.1:30100\n127.0.0.1:30101\n", "h");
  auto remote = rt::net::ParseHostsText("10.0.0.1\n127.0.0.1:30101\n", "h");
  REQUIRE(loopback.ok());
  REQUIRE(remote.ok());
  unsetenv("RINGTRAIN_SECRET");
  auto none = rt::net::LoadSharedSecret("", *loopback);
  REQUIRE(none.ok());
  CHECK(none->empty());
  auto required = rt::net::LoadSharedSecret("", *remote);
  REQUIRE_FALSE(required.ok());
  CHECK(Contains(required.status(), "--secret-file"));

  setenv("RINGTRAIN_SECRET", "env-secret-0123456789", 1);
  auto env = rt::net::LoadSharedSecret("", *remote);
  REQUIRE(env.ok());
  CHECK(*env == "env-secret-0123456789");
  setenv("RINGTRAIN_SECRET", "short", 1);
  CHECK_FALSE(rt::net::LoadSharedSecret("", *remote).ok());
  unsetenv("RINGTRAIN_SECRET");

  std::string path = "/tmp/ringtrain_secret_test_" + std::to_string(getpid());
  {
    std::ofstream out(path);
    out << "file-secret-0123456789\n";
  }
  auto file = rt::net::LoadSharedSecret(path, *remote);
  REQUIRE(file.ok());
  CHECK(*file == "file-secret-0123456789");
  {
    std::ofstream out(path);
    out << "\n";
  }
  auto empty = rt::net::LoadSharedSecret(path, *remote);
  std::remove(path.c_str());
  REQUIRE_FALSE(empty.ok());
  CHECK(Contains(empty.status(), "empty"));
  CHECK_FALSE(rt::net::LoadSharedSecret(path, *remote).ok());  // missing file
}
