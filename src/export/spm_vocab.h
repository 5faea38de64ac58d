// The vocabulary and settings of a SentencePiece model, read from its serialized
// ModelProto (the bytes of tokenizer.model), for writers of other formats: GGUF needs
// every piece with its score and type, and must know whether the model normalizes
// text or adds a dummy prefix the way llama.cpp's SentencePiece tokenizer can mimic.
//
// Only the protobuf wire format is read (no protobuf library): ModelProto field 1
// (repeated SentencePiece {1 piece, 2 score, 3 type}), 2 (TrainerSpec: 3 model_type,
// 35 byte_fallback), 3 (NormalizerSpec: 1 name, 3 add_dummy_prefix,
// 4 remove_extra_whitespaces, 5 escape_whitespaces), with proto2 defaults for absent
// fields. Unknown fields are skipped. Every length is bounds-checked: any byte string
// gives a value or a DataLoss error, never a crash (tests/export feed it garbage).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::exporter {

// SentencePiece's piece types; the numbers are also llama.cpp's token types.
enum class PieceType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct SpmPiece {
  std::string text;  // UTF-8; spaces appear as U+2581; bytes as "<0x0A>"
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
};

struct SpmVocab {
  std::vector<SpmPiece> pieces;  // index = token id
  int model_type = 1;            // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false;
  std::string normalizer_name;  // "identity", "nmt_nfkc", ... ("" = not recorded)
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;

  int FindPiece(absl::string_view text) const;  // id, or -1
};

// Errors: DataLoss naming the problem ("truncated varint at byte 1234", "piece 17 has
// type 9"), InvalidArgument for a model without pieces.
absl::StatusOr<SpmVocab> ParseSpmModel(absl::string_view model_bytes);

}  // namespace rt::exporter
