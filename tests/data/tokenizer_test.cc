// Tokenizer: trained models round-trip Vietnamese exactly, fall back to bytes for
// emoji and invalid bytes, keep '\n' as one token and have an end-of-text control id.
#include "data/tokenizer.h"

#include <doctest/doctest.h>

#include <filesystem>

#include "data/temp_dir.h"
#include "data/tokenizer_trainer.h"
#include "data/vietnamese_text.h"

namespace rt::data {
namespace {

const Tokenizer& SmallTokenizer() {
  static const Tokenizer* tok = [] {
    auto lines = testing::VietnameseLines(400);
    lines.push_back(testing::AllToneMarks());
    auto model = TrainTokenizer(lines, {400, 1});
    REQUIRE_MESSAGE(model.ok(), model.status().ToString());
    auto t = Tokenizer::FromSerialized(*model);
    REQUIRE(t.ok());
    return new Tokenizer(*t);
  }();
  return *tok;
}

TEST_CASE("Vietnamese with every tone mark and đ/Đ round-trips exactly") {
  const Tokenizer& tok = SmallTokenizer();
  CHECK(tok.vocab_size() > 300);
  CHECK(tok.vocab_size() <= 400);
  for (const std::string& text :
       {testing::AllToneMarks(), std::string("  Hai  khoảng trắng,\tvà tab.  "),
        std::string("Dòng một\nDòng hai\n\nĐoạn mới\n"), std::string(" đầu có dấu cách"),
        std::string("Đường Đinh Tiên Hoàng, quận Hoàn Kiếm")}) {
    std::vector<int> ids = tok.Encode(text);
    CHECK_FALSE(ids.empty());
    CHECK(tok.Decode(ids) == text);
  }
  // Merges were learned: common words take fewer tokens than characters.
  CHECK(tok.Encode("Việt Nam").size() < 8);  // 8 characters
}

TEST_CASE("newline is one token, eot is a control id text cannot produce") {
  const Tokenizer& tok = SmallTokenizer();
  std::vector<int> nl = tok.Encode("\n");
  REQUIRE(nl.size() == 1);
  CHECK_FALSE(tok.IsByte(nl[0]));
  CHECK(tok.eot_id() >= 0);
  CHECK(tok.IdToPiece(tok.eot_id()) == kEotPiece);
  std::vector<int> lit = tok.Encode(kEotPiece);
  CHECK(std::find(lit.begin(), lit.end(), tok.eot_id()) == lit.end());
  CHECK(tok.Decode(lit) == kEotPiece);
  std::vector<int> with_eot = tok.Encode("xin chào");
  with_eot.push_back(tok.eot_id());
  CHECK(tok.Decode(with_eot) == "xin chào");
  // Encoding a document whole equals encoding its lines with "\n" between.
  std::vector<int> whole = tok.Encode("Hà Nội\nViệt Nam\n");
  std::vector<int> parts = tok.Encode("Hà Nội");
  parts.push_back(nl[0]);
  for (int id : tok.Encode("Việt Nam")) parts.push_back(id);
  parts.push_back(nl[0]);
  CHECK(whole == parts);
}

TEST_CASE("emoji and invalid bytes fall back to byte tokens") {
  const Tokenizer& tok = SmallTokenizer();
  const std::string emoji = "Chào 😀 bạn 🇻🇳";
  std::vector<int> ids = tok.Encode(emoji);
  int bytes = 0;
  for (int id : ids) bytes += tok.IsByte(id) ? 1 : 0;
  CHECK(bytes >= 12);  // 4 bytes per emoji code point, 3 code points
  CHECK(tok.Decode(ids) == emoji);
  for (int id : ids) CHECK(id != 0);  // never unknown

  // Invalid UTF-8 still encodes to byte pieces (prepare skips such lines instead, see
  // prepare_test); SentencePiece decodes them back as U+FFFD, never the raw bytes.
  const std::string invalid = std::string("ab\xff\xfe") + "cd";
  std::vector<int> inv = tok.Encode(invalid);
  CHECK_FALSE(inv.empty());
  for (int id : inv) CHECK(id != 0);
}

TEST_CASE("a vocabulary too small for the text's characters says the size that fits") {
  // 400 distinct, equally frequent characters: no coverage >= 98% fits in 300 pieces.
  std::vector<std::string> lines;
  for (int rep = 0; rep < 3; ++rep) {
    std::string line;
    for (uint32_t cp = 0x4E00; cp < 0x4E00 + 400; ++cp) {  // CJK ideographs, 3 UTF-8 bytes
      line += static_cast<char>(0xE0 | (cp >> 12));
      line += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      line += static_cast<char>(0x80 | (cp & 0x3F));
    }
    lines.push_back(line);
  }
  auto model = TrainTokenizer(lines, {300, 1});
  REQUIRE_FALSE(model.ok());
  INFO(model.status().ToString());
  CHECK(absl::IsInvalidArgument(model.status()));
  CHECK(std::string(model.status().message()).find("use --vocab-size ") != std::string::npos);
  CHECK(std::string(model.status().message()).find("character_coverage") == std::string::npos);
}

TEST_CASE("model file loads from disk -- a bad file is a clear error") {
  testing::TempDir tmp;
  auto lines = testing::VietnameseLines(100);
  auto model = TrainTokenizer(lines, {350, 2});
  REQUIRE_MESSAGE(model.ok(), model.status().ToString());
  testing::WriteFile(tmp / "t.model", *model);
  auto tok = Tokenizer::Load(tmp / "t.model");
  REQUIRE_MESSAGE(tok.ok(), tok.status().ToString());
  CHECK(tok->Decode(tok->Encode("Việt Nam")) == "Việt Nam");
  testing::WriteFile(tmp / "bad.model", "not a model");
  auto bad = Tokenizer::Load(tmp / "bad.model");
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("bad.model") != std::string::npos);
  CHECK_FALSE(Tokenizer::Load(tmp / "missing.model").ok());
  CHECK_FALSE(TrainTokenizer({}, {400, 1}).ok());
  CHECK_FALSE(TrainTokenizer(lines, {100, 1}).ok());
}

}  // namespace
}  // namespace rt::data
