// TokenDataset over WriteTokenDataset output and over several shards: reads across
// shard boundaries, source bytes, fingerprint, and refusal of damaged manifests.
#include "data/token_dataset.h"

#include <doctest/doctest.h>

#include <vector>

#include "data/temp_dir.h"

namespace rt::data {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::vector<uint32_t> Iota(size_t n, uint32_t start, uint32_t vocab) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (start + static_cast<uint32_t>(i)) % vocab;
  return v;
}

TEST_CASE("WriteTokenDataset then Open both splits") {
  TempDir tmp;
  const std::string dir = tmp / "nested/data";
  auto train = Iota(1000, 0, 256), val = Iota(37, 5, 256);
  REQUIRE(WriteTokenDataset(dir, 256, train, val, 4000, 150).ok());
  auto t = TokenDataset::Open(dir, "train");
  REQUIRE_MESSAGE(t.ok(), t.status().ToString());
  CHECK(t->num_tokens() == 1000);
  CHECK(t->vocab_size() == 256);
  CHECK(t->source_bytes() == 4000);
  CHECK(t->eot_id() == -1);
  CHECK(t->tokenizer_path().empty());
  std::vector<int32_t> out(10);
  t->Read(990, 10, out.data());
  for (int i = 0; i < 10; ++i) CHECK(out[i] == static_cast<int32_t>((990 + i) % 256));
  auto v = TokenDataset::Open(dir, "val");
  REQUIRE(v.ok());
  CHECK(v->num_tokens() == 37);
  CHECK(v->source_bytes() == 150);
  CHECK(v->fingerprint() == t->fingerprint());
  CHECK(v->fingerprint().size() == 16);
  CHECK_FALSE(TokenDataset::Open(dir, "test").ok());
}

TEST_CASE("fingerprint differs when the data differs") {
  TempDir tmp;
  auto a = Iota(100, 0, 300);
  REQUIRE(WriteTokenDataset(tmp / "a", 300, a, {}, 1, 0).ok());
  a[3] = 7;
  REQUIRE(WriteTokenDataset(tmp / "b", 300, a, {}, 1, 0).ok());
  REQUIRE(WriteTokenDataset(tmp / "c", 300, Iota(100, 0, 300), {}, 1, 0).ok());
  auto fa = TokenDataset::Open(tmp / "a", "train"), fb = TokenDataset::Open(tmp / "b", "train"),
       fc = TokenDataset::Open(tmp / "c", "train");
  REQUIRE((fa.ok() && fb.ok() && fc.ok()));
  CHECK(fa->fingerprint() != fb->fingerprint());
  CHECK(fa->fingerprint() == fc->fingerprint());
  auto empty_val = TokenDataset::Open(tmp / "a", "val");
  REQUIRE(empty_val.ok());
  CHECK(empty_val->num_tokens() == 0);
}

TEST_CASE("reads cross shard boundaries, including empty shards, 4-byte tokens") {
  TempDir tmp;
  const int vocab = 70000;
  DataManifest m;
  m.vocab_size = vocab;
  m.token_bytes = 4;
  m.eot_id = 69999;
  std::vector<uint32_t> all;
  const size_t sizes[] = {5, 0, 1, 17, 0, 3};
  for (size_t i = 0; i < 6; ++i) {
    auto part = Iota(sizes[i], static_cast<uint32_t>(all.size() * 1000), vocab);
    ShardEntry e{"train", "train-0000" + std::to_string(i) + ".bin", part.size(), 10, 1, 0};
    auto w = TokenShardWriter::Create(tmp / e.file, vocab, 4);
    REQUIRE(w.ok());
    REQUIRE(w->Append(part).ok());
    REQUIRE(w->Finish().ok());
    e.crc = w->payload_crc();
    m.shards.push_back(e);
    all.insert(all.end(), part.begin(), part.end());
  }
  REQUIRE(WriteManifest(tmp.path(), m).ok());
  auto ds = TokenDataset::Open(tmp.path(), "train");
  REQUIRE_MESSAGE(ds.ok(), ds.status().ToString());
  CHECK(ds->num_tokens() == all.size());
  CHECK(ds->source_bytes() == 60);
  CHECK(ds->num_documents() == 6);
  CHECK(ds->eot_id() == 69999);
  for (uint64_t pos = 0; pos < all.size(); ++pos) {
    for (size_t n = 0; pos + n <= all.size(); n += 3) {
      std::vector<int32_t> out(n + 1, -7);
      ds->Read(pos, n, out.data());
      bool same = out[n] == -7;
      for (size_t i = 0; i < n; ++i) same = same && out[i] == static_cast<int32_t>(all[pos + i]);
      REQUIRE_MESSAGE(same, "pos " << pos << " n " << n);
    }
  }
}

std::string OpenError(const std::string& dir) {
  auto ds = TokenDataset::Open(dir, "train");
  REQUIRE_FALSE(ds.ok());
  return std::string(ds.status().message());
}

bool Has(const std::string& msg, const char* what) {
  INFO(msg);
  return msg.find(what) != std::string::npos;
}

TEST_CASE("truncated, garbled or missing manifest is refused with a clear error") {
  TempDir tmp;
  REQUIRE(WriteTokenDataset(tmp.path(), 100, Iota(50, 0, 100), Iota(5, 0, 100), 200, 20).ok());
  const std::string mpath = tmp / "manifest.txt";
  const std::string good = ReadFile(mpath);

  WriteFile(mpath, good.substr(0, good.size() - 1));
  CHECK(Has(OpenError(tmp.path()), "not terminated"));
  WriteFile(mpath, good.substr(0, good.rfind("end ")));
  CHECK(Has(OpenError(tmp.path()), "no end line"));
  WriteFile(mpath, good.substr(0, good.find("shard val")) + good.substr(good.rfind("end ")));
  CHECK(Has(OpenError(tmp.path()), "end line says 2 shards"));
  std::string edited = good;
  edited[edited.find("shard train train-00000.bin 50 ") + 31] = '9';  // 50 -> 59... tokens digit
  WriteFile(mpath, edited);
  CHECK(Has(OpenError(tmp.path()), "checksum mismatch"));
  WriteFile(mpath, "garbage\n");
  CHECK(Has(OpenError(tmp.path()), "line 1: expected 'format'"));
  WriteFile(mpath, "");
  CHECK(Has(OpenError(tmp.path()), "no end line"));
  std::filesystem::remove(mpath);
  const std::string missing = OpenError(tmp.path());
  CHECK(Has(missing, "manifest.txt not found"));
}

TEST_CASE("a shard that disagrees with the manifest is refused") {
  TempDir tmp;
  REQUIRE(WriteTokenDataset(tmp.path(), 100, Iota(50, 0, 100), {}, 200, 0).ok());
  // Replace the train shard by another valid shard with different contents.
  auto w = TokenShardWriter::Create(tmp / "train-00000.bin", 100, 2);
  REQUIRE(w.ok());
  REQUIRE(w->Append(Iota(50, 1, 100)).ok());
  REQUIRE(w->Finish().ok());
  CHECK(Has(OpenError(tmp.path()), "different checksum"));
  // A truncated shard is reported by the shard reader, naming the file.
  std::string bytes = ReadFile(tmp / "train-00000.bin");
  WriteFile(tmp / "train-00000.bin", bytes.substr(0, bytes.size() - 10));
  const std::string msg = OpenError(tmp.path());
  CHECK(Has(msg, "truncated"));
  CHECK(Has(msg, "train-00000.bin"));
  std::filesystem::remove(tmp / "train-00000.bin");
  CHECK(Has(OpenError(tmp.path()), "No such file"));
}

}  // namespace
}  // namespace rt::data

namespace rt::data {

TEST_CASE("the manifest records the data licence, and refuses a misplaced or broken one") {
  DataManifest m;
  m.vocab_size = 100;
  m.eot_id = 3;
  m.tokenizer_file = "tokenizer.model";
  m.license = "CC BY-SA 3.0/4.0 (Wikipedia tiếng Việt)";
  m.shards.push_back(ShardEntry{"train", "train-00000.bin", 10, 40, 1, 0x1234});
  const std::string text = m.Serialize();
  CHECK(text.find("\nlicense CC BY-SA 3.0/4.0 (Wikipedia tiếng Việt)\nshard ") !=
        std::string::npos);
  absl::StatusOr<DataManifest> back = DataManifest::Parse(text, "m");
  REQUIRE(back.ok());
  CHECK(back->license == m.license);
  m.license.clear();
  CHECK(m.Serialize().find("license") == std::string::npos);
  CHECK(DataManifest::Parse(m.Serialize(), "m")->license.empty());
  // A licence line after the shards, or an empty one: refused, naming the line.
  std::string late = text;
  const size_t at = late.find("license ");
  const std::string line = late.substr(at, late.find('\n', at) + 1 - at);
  late.erase(at, line.size());
  late.insert(late.find("end "), line);
  CHECK(std::string(DataManifest::Parse(late, "m").status().message()).find("misplaced license") !=
        std::string::npos);
  CHECK(!CheckLicenseText("two\nlines").ok());
  CHECK(!CheckLicenseText("").ok());
  CHECK(CheckLicenseText("MIT").ok());
}

}  // namespace rt::data
