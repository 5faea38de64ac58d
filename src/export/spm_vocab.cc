// A bounds-checked reader of the protobuf wire format, just enough for SentencePiece's
// ModelProto (see header). Wire types: 0 varint, 1 fixed64, 2 length-delimited,
// 5 fixed32; groups (3, 4) are not used by ModelProto and are rejected.
#include "export/spm_vocab.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rt::exporter {
namespace {

class WireReader {
 public:
  WireReader(absl::string_view bytes, uint64_t base) : bytes_(bytes), base_(base) {}
  bool done() const { return pos_ >= bytes_.size(); }

  absl::StatusOr<uint64_t> Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return Error("truncated varint");
      const uint8_t b = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return value;
    }
    return Error("varint longer than 10 bytes");
  }

  // One field: its number, wire type, and (for length-delimited fields) its bytes;
  // varint and fixed values in *number_value.
  struct Field {
    uint32_t number;
    uint32_t wire_type;
    uint64_t value = 0;       // wire types 0, 1, 5
    absl::string_view bytes;  // wire type 2
    uint64_t offset = 0;      // of the payload, from the start of the model
  };
  absl::StatusOr<Field> Next() {
    ASSIGN_OR_RETURN(uint64_t key, Varint());
    Field f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire_type = static_cast<uint32_t>(key & 7);
    if (f.number == 0) return Error("field number 0");
    switch (f.wire_type) {
      case 0: {
        ASSIGN_OR_RETURN(f.value, Varint());
        return f;
      }
      case 1:
      case 5: {
        const size_t n = f.wire_type == 1 ? 8 : 4;
        if (bytes_.size() - pos_ < n) return Error("truncated fixed-width field");
        std::memcpy(&f.value, bytes_.data() + pos_, n);  // little-endian host
        pos_ += n;
        return f;
      }
      case 2: {
        ASSIGN_OR_RETURN(uint64_t n, Varint());
        if (n > bytes_.size() - pos_) return Error("length-delimited field runs past the end");
        f.offset = base_ + pos_;
        f.bytes = bytes_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n);
        return f;
      }
      default:
        return Error(absl::StrCat("unsupported wire type ", f.wire_type));
    }
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("SentencePiece model: ", what, " at byte ", base_ + pos_));
  }
  absl::string_view bytes_;
  uint64_t base_;  // offset of bytes_ in the whole model, for messages
  size_t pos_ = 0;
};

float AsFloat(uint64_t fixed32) {
  const uint32_t bits = static_cast<uint32_t>(fixed32);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

absl::StatusOr<SpmPiece> ParsePiece(const WireReader::Field& field, size_t id) {
  SpmPiece piece;
  WireReader r(field.bytes, field.offset);
  while (!r.done()) {
    ASSIGN_OR_RETURN(WireReader::Field f, r.Next());
    if (f.number == 1 && f.wire_type == 2) {
      piece.text = std::string(f.bytes);
    } else if (f.number == 2 && f.wire_type == 5) {
      piece.score = AsFloat(f.value);
    } else if (f.number == 3 && f.wire_type == 0) {
      if (f.value < 1 || f.value > 6) {
        return absl::DataLossError(
            absl::StrCat("SentencePiece model: piece ", id, " has type ", f.value));
      }
      piece.type = static_cast<PieceType>(f.value);
    }
  }
  return piece;
}

absl::Status ParseTrainerSpec(const WireReader::Field& field, SpmVocab* vocab) {
  WireReader r(field.bytes, field.offset);
  while (!r.done()) {
    ASSIGN_OR_RETURN(WireReader::Field f, r.Next());
    if (f.wire_type != 0) continue;
    if (f.number == 3) vocab->model_type = static_cast<int>(f.value);
    if (f.number == 35) vocab->byte_fallback = f.value != 0;
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(const WireReader::Field& field, SpmVocab* vocab) {
  WireReader r(field.bytes, field.offset);
  while (!r.done()) {
    ASSIGN_OR_RETURN(WireReader::Field f, r.Next());
    if (f.number == 1 && f.wire_type == 2) vocab->normalizer_name = std::string(f.bytes);
    if (f.wire_type != 0) continue;
    if (f.number == 3) vocab->add_dummy_prefix = f.value != 0;
    if (f.number == 4) vocab->remove_extra_whitespaces = f.value != 0;
    if (f.number == 5) vocab->escape_whitespaces = f.value != 0;
  }
  return absl::OkStatus();
}

}  // namespace

int SpmVocab::FindPiece(absl::string_view text) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].text == text) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<SpmVocab> ParseSpmModel(absl::string_view model_bytes) {
  SpmVocab vocab;
  WireReader r(model_bytes, 0);
  while (!r.done()) {
    ASSIGN_OR_RETURN(WireReader::Field f, r.Next());
    if (f.wire_type != 2) continue;
    if (f.number == 1) {
      ASSIGN_OR_RETURN(SpmPiece piece, ParsePiece(f, vocab.pieces.size()));
      vocab.pieces.push_back(std::move(piece));
    } else if (f.number == 2) {
      RETURN_IF_ERROR(ParseTrainerSpec(f, &vocab));
    } else if (f.number == 3) {
      RETURN_IF_ERROR(ParseNormalizerSpec(f, &vocab));
    }
  }
  if (vocab.pieces.empty()) {
    return absl::InvalidArgumentError("SentencePiece model has no pieces");
  }
  return vocab;
}

}  // namespace rt::exporter
