// Token shards: round trip in both widths, and every kind of damage is refused with an
// error naming the file and the problem.
#include "data/token_shard.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "data/temp_dir.h"

namespace rt::data {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::vector<uint32_t> Pattern(size_t n, uint32_t vocab) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>((i * 2654435761u) % vocab);
  return v;
}

void WriteShard(const std::string& path, int vocab, int width, const std::vector<uint32_t>& t) {
  auto w = TokenShardWriter::Create(path, vocab, width);
  REQUIRE(w.ok());
  // Several appends, one larger than the internal buffer.
  size_t half = t.size() / 2;
  REQUIRE(w->Append(absl::MakeConstSpan(t).subspan(0, half)).ok());
  REQUIRE(w->Append(absl::MakeConstSpan(t).subspan(half)).ok());
  REQUIRE(w->Finish().ok());
}

TEST_CASE("token shard round trip, 2- and 4-byte tokens") {
  TempDir tmp;
  for (auto [vocab, width] : {std::pair{500, 2}, std::pair{65536, 2}, std::pair{100000, 4}}) {
    const std::string path = tmp / "s.bin";
    std::vector<uint32_t> tokens = Pattern(700001, static_cast<uint32_t>(vocab));
    tokens[5] = static_cast<uint32_t>(vocab - 1);
    WriteShard(path, vocab, width, tokens);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    CHECK(std::filesystem::file_size(path) == 64 + tokens.size() * width);
    auto shard = TokenShard::Open(path);
    REQUIRE_MESSAGE(shard.ok(), shard.status().ToString());
    CHECK(shard->size() == tokens.size());
    CHECK(shard->vocab_size() == vocab);
    CHECK(shard->token_bytes() == width);
    std::vector<int32_t> out(tokens.size());
    shard->Read(0, out.size(), out.data());
    bool same = true;
    for (size_t i = 0; i < tokens.size(); ++i)
      same = same && out[i] == static_cast<int32_t>(tokens[i]);
    CHECK(same);
    std::vector<int32_t> part(3);
    shard->Read(tokens.size() - 3, 3, part.data());
    CHECK(part[2] == static_cast<int32_t>(tokens.back()));
  }
}

TEST_CASE("empty shard is valid") {
  TempDir tmp;
  WriteShard(tmp / "e.bin", 10, 2, {});
  auto shard = TokenShard::Open(tmp / "e.bin");
  REQUIRE(shard.ok());
  CHECK(shard->size() == 0);
}

TEST_CASE("writer refuses out-of-vocabulary tokens and bad widths") {
  TempDir tmp;
  CHECK_FALSE(TokenShardWriter::Create(tmp / "a.bin", 70000, 2).ok());
  CHECK_FALSE(TokenShardWriter::Create(tmp / "a.bin", 100, 3).ok());
  auto w = TokenShardWriter::Create(tmp / "a.bin", 100, 2);
  REQUIRE(w.ok());
  std::vector<uint32_t> bad = {1, 2, 100};
  absl::Status st = w->Append(bad);
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message().find("token 100") != std::string::npos);
}

TEST_CASE("abandoned writer leaves no file under either name") {
  TempDir tmp;
  {
    auto w = TokenShardWriter::Create(tmp / "x.bin", 100, 2);
    REQUIRE(w.ok());
    std::vector<uint32_t> t = {1, 2, 3};
    REQUIRE(w->Append(t).ok());
    CHECK(std::filesystem::exists(tmp / "x.bin.tmp"));
  }
  CHECK_FALSE(std::filesystem::exists(tmp / "x.bin.tmp"));
  CHECK_FALSE(std::filesystem::exists(tmp / "x.bin"));
}

// Writes a good shard, applies `damage` to its bytes, and returns Open's error message.
std::string DamagedShardError(const std::function<void(std::string&)>& damage) {
  TempDir tmp;
  const std::string path = tmp / "d.bin";
  WriteShard(path, 1000, 2, Pattern(1000, 1000));
  std::string bytes = ReadFile(path);
  damage(bytes);
  WriteFile(path, bytes);
  auto shard = TokenShard::Open(path);
  REQUIRE_FALSE(shard.ok());
  const std::string msg(shard.status().message());
  CHECK_MESSAGE(msg.find(path) != std::string::npos, msg);
  return msg;
}

bool Has(const std::string& msg, const char* what) {
  INFO(msg);
  return msg.find(what) != std::string::npos;
}

TEST_CASE("damaged shards are refused with a clear error") {
  CHECK(Has(DamagedShardError([](std::string& b) { b.resize(b.size() - 2); }), "truncated"));
  CHECK(Has(DamagedShardError([](std::string& b) { b.resize(30); }), "truncated"));
  CHECK(Has(DamagedShardError([](std::string& b) { b += "xx"; }), "wrong size"));
  CHECK(Has(DamagedShardError([](std::string& b) { b[0] = 'X'; }), "bad magic"));
  CHECK(Has(DamagedShardError([](std::string& b) { b[16] ^= 1; }), "header checksum"));
  CHECK(Has(DamagedShardError([](std::string& b) { b[64 + 100] ^= 1; }), "payload checksum"));
  CHECK(Has(DamagedShardError([](std::string& b) { b.clear(); }), "truncated"));
}

TEST_CASE("shard bytes validate in memory as Open validates the file") {
  TempDir tmp;
  const std::string path = tmp / "s.bin";
  WriteShard(path, 1000, 2, Pattern(1000, 1000));
  std::string bytes = ReadFile(path);
  auto span = [&] {
    return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  };
  auto header = ValidateTokenShard(span(), "mem.bin");
  REQUIRE(header.ok());
  CHECK(header->token_count == 1000);
  CHECK(header->token_bytes == 2);
  CHECK(header->vocab_size == 1000);
  bytes.resize(40);
  CHECK(Has(std::string(ValidateTokenShard(span(), "mem.bin").status().message()),
            "token shard mem.bin is truncated: 40 bytes"));
}

TEST_CASE("missing shard file is NotFound naming the path") {
  auto shard = TokenShard::Open("/tmp/rt_no_such_dir/none.bin");
  REQUIRE_FALSE(shard.ok());
  CHECK(absl::IsNotFound(shard.status()));
  CHECK(Has(std::string(shard.status().message()), "/tmp/rt_no_such_dir/none.bin"));
}

}  // namespace
}  // namespace rt::data
