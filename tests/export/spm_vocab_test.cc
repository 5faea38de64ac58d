// The SentencePiece ModelProto reader agrees with SentencePiece itself on a model that
// ringtrain trained (pieces, types, settings), and any other bytes, random or a
// truncated model, give a value or an error, never a crash or a hang.
#include "export/spm_vocab.h"

#include <doctest/doctest.h>

#include <random>

#include "data/tokenizer.h"
#include "export_test_util.h"

using rt::exporter::ParseSpmModel;
using rt::exporter::PieceType;
using rt::exporter::SpmVocab;

TEST_CASE("ParseSpmModel reads what SentencePiece reads from a ringtrain tokenizer") {
  const std::string& bytes = rt::exporter::testing::SmallTokenizerModel();
  absl::StatusOr<rt::data::Tokenizer> tok = rt::data::Tokenizer::FromSerialized(bytes);
  REQUIRE(tok.ok());
  absl::StatusOr<SpmVocab> v = ParseSpmModel(bytes);
  REQUIRE(v.ok());
  REQUIRE(static_cast<int>(v->pieces.size()) == tok->vocab_size());
  int bytes_seen = 0;
  for (int id = 0; id < tok->vocab_size(); ++id) {
    INFO("id " << id);
    CHECK(v->pieces[id].text == tok->IdToPiece(id));
    CHECK((v->pieces[id].type == PieceType::kByte) == tok->IsByte(id));
    bytes_seen += v->pieces[id].type == PieceType::kByte;
  }
  CHECK(bytes_seen == 256);
  CHECK(v->pieces[0].type == PieceType::kUnknown);
  CHECK(v->pieces[tok->eot_id()].type == PieceType::kControl);
  CHECK(v->pieces[tok->eot_id()].text == "<|endoftext|>");
  const int newline = v->FindPiece("\n");
  REQUIRE(newline >= 0);
  CHECK(v->pieces[newline].type == PieceType::kUserDefined);
  // BPE scores fall with the merge order; ringtrain's trainer settings are recorded.
  const int first_normal = v->FindPiece("<0xFF>") + 1;
  CHECK(v->pieces[first_normal].type == PieceType::kNormal);
  CHECK(v->pieces[first_normal].score > v->pieces[first_normal + 5].score);
  CHECK(v->model_type == 2);
  CHECK(v->byte_fallback);
  CHECK(v->normalizer_name == "identity");
  CHECK_FALSE(v->add_dummy_prefix);
  CHECK_FALSE(v->remove_extra_whitespaces);
  CHECK(v->escape_whitespaces);
}

TEST_CASE("ParseSpmModel: garbage and truncated models give errors, never a crash") {
  const std::string& model = rt::exporter::testing::SmallTokenizerModel();
  int errors = 0;
  for (size_t n = 0; n < model.size(); n += 1 + n / 50) {
    errors += !ParseSpmModel(model.substr(0, n)).ok();
  }
  CHECK(errors > 0);
  CHECK(ParseSpmModel("").status().code() == absl::StatusCode::kInvalidArgument);
  absl::Status bad = ParseSpmModel(std::string("\x0a\xff\xff\xff\xff\x0f", 6)).status();
  CHECK(bad.code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(bad.message()).find("runs past the end at byte") != std::string::npos);
  std::mt19937 rng(15);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 2) junk = model.substr(0, rng() % model.size()) + junk;  // valid start, bad end
    (void)ParseSpmModel(junk);  // must return; ASan/UBSan watch the reads
  }
  // A piece type outside SentencePiece's enum is refused with its id.
  const std::string piece = std::string("\x0a\x05\x0a\x01x\x18\x09", 7);
  CHECK(std::string(ParseSpmModel(piece).status().message()) ==
        "SentencePiece model: piece 0 has type 9");
}
