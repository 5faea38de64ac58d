// Tokenizer: a SentencePiece model (an ordinary .model file, loadable by the Python
// `sentencepiece` package) plus what ringtrain needs of it. Models trained by
// `ringtrain prepare` (tokenizer_trainer.h) are BPE with byte fallback, identity
// normalization and no dummy prefix, so Decode(Encode(x)) == x for any valid UTF-8 x,
// '\n' is one token, and the end-of-text token is the control symbol "<|endoftext|>".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rt::data {

class SpmModel;

inline constexpr char kEotPiece[] = "<|endoftext|>";

// Immutable after Load; cheap to copy; Encode/Decode are thread-safe.
class Tokenizer {
 public:
  static absl::StatusOr<Tokenizer> Load(const std::string& model_path);
  static absl::StatusOr<Tokenizer> FromSerialized(const std::string& model_bytes);

  // Text -> ids (never fails on valid UTF-8; invalid bytes become byte pieces).
  std::vector<int> Encode(absl::string_view text) const;
  // Ids -> text; control ids (end of text) produce no text; out-of-range ids are skipped.
  std::string Decode(absl::Span<const int> ids) const;
  int vocab_size() const;
  // Id of "<|endoftext|>" when the model has it as a control symbol, else the model's
  // eos id, else -1.
  int eot_id() const { return eot_id_; }
  bool IsByte(int id) const;
  std::string IdToPiece(int id) const;
  const SpmModel& model() const { return *model_; }

 private:
  Tokenizer() = default;
  static absl::StatusOr<Tokenizer> Finish(std::shared_ptr<SpmModel> model);
  std::shared_ptr<const SpmModel> model_;
  int eot_id_ = -1;
};

}  // namespace rt::data
