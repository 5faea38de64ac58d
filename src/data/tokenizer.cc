// Implementation of the Tokenizer wrapper (see tokenizer.h); SentencePiece is reached
// only through spm_bridge.h.
#include "data/tokenizer.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "data/spm_bridge.h"

namespace rt::data {

absl::StatusOr<Tokenizer> Tokenizer::Finish(std::shared_ptr<SpmModel> model) {
  Tokenizer t;
  int eot = model->PieceToId(kEotPiece);
  if (eot >= 0 && model->IsControl(eot) && model->IdToPiece(eot) == kEotPiece) {
    t.eot_id_ = eot;
  } else {
    t.eot_id_ = -1;
    int eos = model->PieceToId("</s>");
    if (eos >= 0 && model->IsControl(eos) && model->IdToPiece(eos) == "</s>") t.eot_id_ = eos;
  }
  t.model_ = std::move(model);
  return t;
}

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& model_path) {
  auto model = std::make_shared<SpmModel>();
  std::string err = model->LoadFile(model_path);
  if (!err.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load SentencePiece model ", model_path, ": ", err));
  }
  return Finish(std::move(model));
}

absl::StatusOr<Tokenizer> Tokenizer::FromSerialized(const std::string& model_bytes) {
  auto model = std::make_shared<SpmModel>();
  std::string err = model->LoadSerialized(model_bytes);
  if (!err.empty()) return absl::InvalidArgumentError("bad SentencePiece model: " + err);
  return Finish(std::move(model));
}

std::vector<int> Tokenizer::Encode(absl::string_view text) const {
  std::vector<int> ids;
  std::string err = model_->Encode(std::string_view(text.data(), text.size()), &ids);
  if (!err.empty()) ids.clear();
  return ids;
}

std::string Tokenizer::Decode(absl::Span<const int> ids) const {
  std::vector<int> valid;
  valid.reserve(ids.size());
  const int n = vocab_size();
  for (int id : ids) {
    if (id >= 0 && id < n) valid.push_back(id);
  }
  std::string text;
  std::string err = model_->Decode(valid, &text);
  if (!err.empty()) text.clear();
  return text;
}

int Tokenizer::vocab_size() const { return model_->PieceSize(); }
bool Tokenizer::IsByte(int id) const { return model_->IsByte(id); }
std::string Tokenizer::IdToPiece(int id) const { return model_->IdToPiece(id); }

}  // namespace rt::data
