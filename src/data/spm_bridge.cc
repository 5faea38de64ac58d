// Implementation of the SentencePiece bridge (see spm_bridge.h). Includes no Abseil.
#include "data/spm_bridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace rt::data {
namespace {

// Feeds SentencePieceTrainer from a callback.
class CallbackIterator : public sentencepiece::SentenceIterator {
 public:
  explicit CallbackIterator(const std::function<bool(std::string*)>& next) : next_(next) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

 private:
  const std::function<bool(std::string*)>& next_;
  std::string value_;
  bool done_ = false;
};

}  // namespace

SpmModel::SpmModel() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SpmModel::~SpmModel() = default;
SpmModel::SpmModel(SpmModel&&) noexcept = default;
SpmModel& SpmModel::operator=(SpmModel&&) noexcept = default;

std::string SpmModel::LoadFile(const std::string& path) {
  auto st = sp_->Load(path);
  return st.ok() ? "" : st.ToString();
}

std::string SpmModel::LoadSerialized(const std::string& model_bytes) {
  auto st = sp_->LoadFromSerializedProto(model_bytes);
  return st.ok() ? "" : st.ToString();
}

std::string SpmModel::Encode(std::string_view text, std::vector<int>* ids) const {
  auto st = sp_->Encode(text, ids);
  return st.ok() ? "" : st.ToString();
}

std::string SpmModel::Decode(const std::vector<int>& ids, std::string* text) const {
  auto st = sp_->Decode(ids, text);
  return st.ok() ? "" : st.ToString();
}

int SpmModel::PieceSize() const { return sp_->GetPieceSize(); }
int SpmModel::PieceToId(std::string_view piece) const { return sp_->PieceToId(piece); }
std::string SpmModel::IdToPiece(int id) const { return sp_->IdToPiece(id); }
bool SpmModel::IsControl(int id) const { return sp_->IsControl(id); }
bool SpmModel::IsUnknown(int id) const { return sp_->IsUnknown(id); }
bool SpmModel::IsByte(int id) const { return sp_->IsByte(id); }

std::string SpmTrain(const std::unordered_map<std::string, std::string>& options,
                     const std::function<bool(std::string*)>& next, std::string* model_bytes) {
  CallbackIterator it(next);
  auto st = sentencepiece::SentencePieceTrainer::Train(options, &it, model_bytes);
  return st.ok() ? "" : st.ToString();
}

}  // namespace rt::data
