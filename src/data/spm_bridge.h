// The only door to SentencePiece. Debian's sentencepiece_processor.h declares
// `namespace absl { using std::string_view; }`, which collides with Abseil's own
// absl::string_view (FACTS: Abseil 20220623), so no translation unit may include both.
// This header uses only std types; spm_bridge.cc includes SentencePiece and no Abseil.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace rt::data {

// A loaded SentencePiece model. Encode/Decode are const and safe to call from many
// threads at once. Errors are returned as text ("" = success) so that callers can wrap
// them in absl::Status.
class SpmModel {
 public:
  SpmModel();
  ~SpmModel();
  SpmModel(SpmModel&&) noexcept;
  SpmModel& operator=(SpmModel&&) noexcept;

  std::string LoadFile(const std::string& path);
  std::string LoadSerialized(const std::string& model_bytes);

  std::string Encode(std::string_view text, std::vector<int>* ids) const;
  std::string Decode(const std::vector<int>& ids, std::string* text) const;
  int PieceSize() const;
  int PieceToId(std::string_view piece) const;  // unk id if absent
  std::string IdToPiece(int id) const;
  bool IsControl(int id) const;
  bool IsUnknown(int id) const;
  bool IsByte(int id) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Trains a model with SentencePieceTrainer. `options` are trainer flags without "--"
// (e.g. {"model_type","bpe"}); sentences come from `next`, which fills *s and returns
// false at the end. On success *model_bytes holds the serialized model proto.
std::string SpmTrain(const std::unordered_map<std::string, std::string>& options,
                     const std::function<bool(std::string*)>& next, std::string* model_bytes);

}  // namespace rt::data
