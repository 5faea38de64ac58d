// Validation loss and bits per byte over fixed token windows.
//
// Bits per byte (tokenizer-independent): the mean loss in bits per token times the
// split's tokens per source byte, val_bpb = val_loss / ln 2 * num_tokens / source_bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "data/token_dataset.h"
#include "model/gpt.h"

namespace rt::train {

struct EvalResult {
  double loss = 0;     // mean cross-entropy, nats per target token
  int64_t tokens = 0;  // target tokens evaluated
  double bpb = 0;      // bits per byte; NaN if the split records no source bytes
};

// Mean loss over the windows starting at `starts` (each seq_len + 1 tokens), in
// batches of at most gpt.options().max_batch. Deterministic for a thread count.
// Stops at a oneDNN failure (loss NaN): callers check gpt.status() after it.
EvalResult EvaluateWindows(model::Gpt& gpt, absl::Span<const float> params,
                           const data::TokenDataset& dataset, const std::vector<uint64_t>& starts);

// loss / ln 2 * num_tokens / source_bytes, NaN if source_bytes == 0.
double BitsPerByte(double loss_nats, const data::TokenDataset& dataset);

// Non-overlapping windows 0, T, 2T, ... covering the split (each predicts T tokens),
// at most ceil(max_tokens / T) of them (max_tokens 0 = no bound).
std::vector<uint64_t> ContiguousWindows(uint64_t num_tokens, int seq_len, uint64_t max_tokens);

}  // namespace rt::train
