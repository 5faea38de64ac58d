// ModelSource: what every export writer reads, gathered by the caller (cli/export.cc
// loads it from a checkpoint), so that writers know nothing of checkpoints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "export/spm_vocab.h"
#include "export/tensor_encoding.h"
#include "model/gpt_config.h"
#include "model/param_layout.h"

namespace rt::exporter {

struct ModelSource {
  model::GptConfig config;
  absl::Span<const float> params;  // ParamLayout(config) order; must outlive the writers
  std::string tokenizer_model;     // serialized SentencePiece model (tokenizer.model bytes)
  int eot_id = -1;                 // end-of-text id (-1: none)
  int64_t step = 0;                // optimizer steps trained
  int64_t tokens_trained = 0;      // tokens seen by training (0: unknown)
  std::string name;                // model name for general.name / README
  std::string data_license;        // licence of the training data ("": unknown)
  std::string data_fingerprint;    // of the training data ("": unknown)
};

// A model checked and ready for writers: the parsed vocabulary (padded with unused
// pieces up to the model's vocab size) and what another tokenizer implementation
// cannot reproduce (warnings for the user).
struct PreparedModel {
  const ModelSource* source = nullptr;
  model::ParamLayout layout{model::GptConfig{}};
  SpmVocab vocab;
  std::vector<std::string> warnings;
  absl::Span<const float> Tensor(size_t offset, size_t count) const {
    return source->params.subspan(offset, count);
  }
};

// Errors: InvalidArgument / DataLoss naming the problem (params of the wrong size, no
// or a corrupt tokenizer, a tokenizer with more ids than the model, an end-of-text id
// outside the vocabulary, and for f16 a tensor beyond f16's range, naming the tensor
// and its largest value). `source` must outlive the result.
absl::StatusOr<PreparedModel> PrepareModel(const ModelSource& source, ExportDtype dtype);

// A matrix (rows, cols) row-major -> (cols, rows) row-major.
std::vector<float> Transposed(absl::Span<const float> m, int64_t rows, int64_t cols);

// The rows of a q or k projection (heads * head_size rows of cols) from ringtrain's
// (and Hugging Face's) half-split RoPE order, where row i of a head pairs with row
// i + head_size/2, to the interleaved order llama.cpp's `llama` architecture rotates
// (rope type "normal": rows 2i and 2i+1 pair): new row 2i + j of a head is old row
// j * head_size/2 + i. The same permutation as llama.cpp's converter applies to
// Hugging Face checkpoints (reshape (heads, 2, hs/2, cols), swap axes 1 and 2).
std::vector<float> InterleaveRopeRows(absl::Span<const float> m, int64_t heads, int64_t head_size,
                                      int64_t cols);

}  // namespace rt::exporter
