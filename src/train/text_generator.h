// Autoregressive sampling from a trained GPT: temperature, top-k, a seeded RNG.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/types/span.h"
#include "model/gpt.h"

namespace rt::train {

struct SampleOptions {
  int max_new_tokens = 200;
  float temperature = 0.8f;  // 0 = greedy: Argmax (top_k and the seed do not matter)
  int top_k = 50;            // keep the k most likely tokens (0 = all)
  uint64_t seed = 1337;
  int stop_id = -1;  // stop after sampling this id (end of text); -1 = never
};

// The id of the largest logit; ties go to the lowest id, NaN logits are never chosen
// (0 if all are NaN). This is what temperature 0 draws: exact greedy decoding, so
// that another implementation of the model can be compared token for token.
int Argmax(absl::Span<const float> logits);

// Picks one id from `logits` (vocab floats): softmax(logits / temperature) restricted
// to the top_k largest, drawn with *rng_state (advanced). Ties keep the lower id.
int SampleFromLogits(absl::Span<const float> logits, float temperature, int top_k,
                     uint64_t* rng_state);

// Extends `prompt` (ids, may be empty: generation then starts from `start_id`) by up
// to max_new_tokens ids. The model sees the last seq_len ids at each step (a sliding
// window). Returns only the new ids; on_token (optional) sees each as it is drawn,
// with the logits (vocab floats, valid during the call) it was drawn from. Stops at a
// oneDNN failure: callers check gpt.status() after it.
std::vector<int32_t> Generate(
    model::Gpt& gpt, absl::Span<const float> params, std::vector<int32_t> prompt, int start_id,
    const SampleOptions& options,
    const std::function<void(int32_t id, absl::Span<const float> logits)>& on_token = {});

}  // namespace rt::train
