// Evaluation: forward-only loss over fixed windows.
#include "train/evaluator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "data/batch_sampler.h"

namespace rt::train {

EvalResult EvaluateWindows(model::Gpt& gpt, absl::Span<const float> params,
                           const data::TokenDataset& dataset, const std::vector<uint64_t>& starts) {
  const int T = gpt.config().seq_len;
  const size_t max_batch = static_cast<size_t>(gpt.options().max_batch);
  std::vector<int32_t> tokens(max_batch * T), targets(max_batch * T);
  double loss_sum = 0;
  for (size_t i = 0; i < starts.size(); i += max_batch) {
    std::vector<uint64_t> chunk(starts.begin() + i,
                                starts.begin() + std::min(starts.size(), i + max_batch));
    data::ReadWindows(dataset, chunk, T, tokens.data(), targets.data());
    loss_sum += gpt.Loss(params, tokens.data(), targets.data(), static_cast<int>(chunk.size()));
    if (!gpt.status().ok()) break;  // loss_sum is NaN; the caller reports gpt.status()
  }
  EvalResult r;
  r.tokens = static_cast<int64_t>(starts.size()) * T;
  r.loss = r.tokens > 0 ? loss_sum / static_cast<double>(r.tokens)
                        : std::numeric_limits<double>::quiet_NaN();
  r.bpb = BitsPerByte(r.loss, dataset);
  return r;
}

double BitsPerByte(double loss_nats, const data::TokenDataset& dataset) {
  if (dataset.source_bytes() == 0) return std::numeric_limits<double>::quiet_NaN();
  return loss_nats / std::log(2.0) * static_cast<double>(dataset.num_tokens()) /
         static_cast<double>(dataset.source_bytes());
}

std::vector<uint64_t> ContiguousWindows(uint64_t num_tokens, int seq_len, uint64_t max_tokens) {
  std::vector<uint64_t> out;
  const uint64_t T = static_cast<uint64_t>(seq_len);
  for (uint64_t start = 0; start + T + 1 <= num_tokens; start += T) {
    if (max_tokens > 0 && out.size() * T >= max_tokens) break;
    out.push_back(start);
  }
  return out;
}

}  // namespace rt::train
