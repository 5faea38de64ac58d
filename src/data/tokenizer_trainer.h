// Trains the SentencePiece BPE model that `ringtrain prepare` uses, from an in-memory
// sample of lines (see text_sampler.h for how the sample stays bounded).
//
// Settings, and why:
//  - model_type bpe, byte_fallback: no input byte is ever unknown.
//  - normalization identity, add_dummy_prefix false, remove_extra_whitespaces false:
//    Vietnamese diacritics and all spacing survive, Decode(Encode(x)) == x for NFC
//    (indeed any valid UTF-8) text.
//  - "\n" is a user-defined symbol (one token, never merged across lines), so a document
//    can be encoded line by line or whole with the same result.
//  - "<|endoftext|>" is a control symbol: text can never produce it; it ends documents.
//  - no <s>/</s>; split_digits; character_coverage 0.9995 (rarer characters -> bytes).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rt::data {

struct TokenizerTrainOptions {
  int vocab_size = 32000;
  int threads = 1;  // unused by BPE training (kept so the .model is thread-count independent)
};

// Returns the serialized model. `lines` have no '\n' and are valid UTF-8. If the sample
// is too small for vocab_size, the model has fewer pieces (never an error for that).
absl::StatusOr<std::string> TrainTokenizer(const std::vector<std::string>& lines,
                                           const TokenizerTrainOptions& options);

}  // namespace rt::data
