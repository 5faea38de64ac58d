// Sampling: top-k by partial sort, softmax in double, inverse-CDF draw.
#include "train/text_generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "data/batch_sampler.h"

namespace rt::train {
namespace {

// Uniform double in [0, 1) from a splitmix64 stream (same on every platform, unlike
// std:: distributions).
double NextUniform(uint64_t* state) {
  *state += 0x9E3779B97F4A7C15ull;
  return static_cast<double>(data::SplitMix64(*state) >> 11) * 0x1.0p-53;
}

}  // namespace

int Argmax(absl::Span<const float> logits) {
  // Strictly greater: the first (lowest) id of equal maxima wins. NaN never wins.
  int best = -1;
  for (int i = 0; i < static_cast<int>(logits.size()); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = i;
  }
  return best < 0 ? 0 : best;
}

int SampleFromLogits(absl::Span<const float> logits, float temperature, int top_k,
                     uint64_t* rng_state) {
  const int V = static_cast<int>(logits.size());
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  auto more_likely = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (temperature <= 0.0f) return Argmax(logits);
  const int k = (top_k <= 0 || top_k > V) ? V : top_k;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), more_likely);
  std::vector<double> p(k);
  const double max_logit = logits[ids[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    p[i] = std::exp((logits[ids[i]] - max_logit) / temperature);
    sum += p[i];
  }
  double u = NextUniform(rng_state) * sum;
  for (int i = 0; i < k; ++i) {
    if (u < p[i]) return ids[i];
    u -= p[i];
  }
  return ids[k - 1];
}

std::vector<int32_t> Generate(
    model::Gpt& gpt, absl::Span<const float> params, std::vector<int32_t> prompt, int start_id,
    const SampleOptions& options,
    const std::function<void(int32_t id, absl::Span<const float> logits)>& on_token) {
  const int T = gpt.config().seq_len;
  const int V = gpt.config().vocab_size;
  if (prompt.empty()) prompt.push_back(start_id);
  std::vector<int32_t> context = std::move(prompt);
  std::vector<int32_t> out;
  std::vector<float> logits(V);
  uint64_t rng = options.seed;
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const int len = std::min<int>(T, static_cast<int>(context.size()));
    gpt.LastLogits(params, context.data() + context.size() - len, 1, len, logits.data());
    if (!gpt.status().ok()) break;  // the caller reports gpt.status()
    const int id = SampleFromLogits(logits, options.temperature, options.top_k, &rng);
    out.push_back(id);
    context.push_back(id);
    if (on_token) on_token(id, logits);
    if (id == options.stop_id) break;
  }
  return out;
}

}  // namespace rt::train
