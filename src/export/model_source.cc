// Checks of a model before export, and the vocabulary it carries (see header).
#include "export/model_source.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace rt::exporter {

absl::StatusOr<PreparedModel> PrepareModel(const ModelSource& source, ExportDtype dtype) {
  RETURN_IF_ERROR(source.config.Validate());
  PreparedModel m;
  m.source = &source;
  m.layout = model::ParamLayout(source.config);
  if (source.params.size() != m.layout.total_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("model has ", source.params.size(),
                                                   " parameters, its shape needs ",
                                                   m.layout.total_floats()));
  }
  if (source.tokenizer_model.empty()) {
    return absl::FailedPreconditionError(
        "the checkpoint holds no tokenizer (trained on synthetic data?): an exported model "
        "would have no vocabulary");
  }
  absl::StatusOr<SpmVocab> vocab = ParseSpmModel(source.tokenizer_model);
  if (!vocab.ok()) {
    return absl::DataLossError(absl::StrCat("bad tokenizer.model: ", vocab.status().message()));
  }
  m.vocab = std::move(*vocab);
  const int V = source.config.vocab_size;
  if (static_cast<int>(m.vocab.pieces.size()) > V) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer has ", m.vocab.pieces.size(), " ids, the model only ", V));
  }
  // Ids the tokenizer never produces (a model shaped for a larger vocabulary): named
  // unused pieces, so the file's vocabulary has one entry per row of wte.
  for (int id = static_cast<int>(m.vocab.pieces.size()); id < V; ++id) {
    m.vocab.pieces.push_back(SpmPiece{absl::StrCat("<unused_", id, ">"), 0.0f, PieceType::kUnused});
  }
  if (source.eot_id >= V) {
    return absl::DataLossError(
        absl::StrCat("end-of-text id ", source.eot_id, " is outside the vocabulary of ", V));
  }
  if (dtype == ExportDtype::kF16) {
    for (const model::TensorView& t : m.layout.tensors()) {
      const float largest = LargestMagnitude(m.Tensor(t.offset, t.count));
      if (largest > kLargestHalf) {
        return absl::FailedPreconditionError(
            absl::StrFormat("tensor %s holds values up to %g, beyond f16's %g: export with "
                            "--dtype bf16 or f32",
                            t.name, largest, kLargestHalf));
      }
    }
  }
  // What llama.cpp's SentencePiece tokenizer (merges by score, no normalization) and
  // similar re-implementations cannot reproduce exactly.
  const SpmVocab& v = m.vocab;
  if (v.model_type != 2) {
    m.warnings.push_back(absl::StrCat(
        "the tokenizer is a SentencePiece ", v.model_type == 1 ? "unigram" : "non-BPE",
        " model: llama.cpp merges pieces by score as in BPE and may split text differently"));
  }
  if (!v.normalizer_name.empty() && v.normalizer_name != "identity") {
    m.warnings.push_back(absl::StrCat("the tokenizer normalizes text (", v.normalizer_name,
                                      "); llama.cpp does not, so text that normalization "
                                      "changes tokenizes differently"));
  }
  if (v.remove_extra_whitespaces) {
    m.warnings.push_back(
        "the tokenizer collapses runs of spaces; llama.cpp keeps them, so such text tokenizes "
        "differently");
  }
  if (!v.byte_fallback) {
    m.warnings.push_back(
        "the tokenizer has no byte fallback: llama.cpp needs <0xXX> pieces for characters "
        "outside the vocabulary and may fail on them");
  }
  return m;
}

std::vector<float> Transposed(absl::Span<const float> m, int64_t rows, int64_t cols) {
  std::vector<float> t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

std::vector<float> InterleaveRopeRows(absl::Span<const float> m, int64_t heads, int64_t head_size,
                                      int64_t cols) {
  std::vector<float> out(static_cast<size_t>(heads * head_size * cols));
  const int64_t half = head_size / 2;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const float* src = m.data() + (h * head_size + j * half + i) * cols;
        std::copy(src, src + cols, out.data() + (h * head_size + 2 * i + j) * cols);
      }
    }
  }
  return out;
}

}  // namespace rt::exporter
