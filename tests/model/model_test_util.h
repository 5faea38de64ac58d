// Helpers of the whole-model tests (gpt_test.cc, llama_test.cc): random batches, a
// model or a failed test, parameters that exercise every gradient path.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <vector>

#include "bf16_paths.h"
#include "model/gpt.h"
#include "model/onednn_isa.h"

namespace rt::model::testing {

struct Batch {
  std::vector<int32_t> tokens, targets;
};

inline Batch RandomBatch(const GptConfig& c, int B, int T, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    b.targets.push_back(static_cast<int32_t>(rng() % c.vocab_size));
  }
  return b;
}

inline std::unique_ptr<Gpt> MakeGpt(const GptConfig& c, Precision p, bool recompute, int max_batch,
                                    int attention_block = 0) {
  auto g = Gpt::Create(c, GptOptions{p, recompute, max_batch, attention_block});
  REQUIRE(g.ok());
  return std::move(g).value();
}

// Params with non-trivial LN gains and biases so that every gradient path is exercised.
inline std::vector<float> TestParams(const Gpt& g, uint64_t seed) {
  std::vector<float> p(g.layout().total_floats());
  g.InitParams(absl::MakeSpan(p), seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (const TensorView& t : g.layout().tensors()) {
    if (t.shape.size() != 1) continue;
    for (size_t i = 0; i < t.count; ++i) p[t.offset + i] += u(rng);
  }
  // Larger weights than GPT-2 init, so attention is not uniform and gradients are not tiny.
  for (float& x : p) x *= 3.0f;
  return p;
}

// bf16 where oneDNN has no bf16 matmul (AVX2 and below): Create must refuse it clearly,
// and then there is no bf16 arithmetic to check. True in that case (refusal checked).
inline bool Bf16Refused(const GptConfig& c, Precision p, int max_batch, int attention_block = 0) {
  if (p != Precision::kBf16 || ::rt::testing::Bf16MatmulsRun()) return false;
  auto g = Gpt::Create(c, GptOptions{p, false, max_batch, attention_block});
  REQUIRE_FALSE(g.ok());
  ::rt::testing::CheckBf16Refusal(g.status());
  MESSAGE("bf16 is not available on oneDNN ISA ", model::OnednnIsaName(),
          ": checked the refusal instead of bf16 arithmetic");
  return true;
}

}  // namespace rt::model::testing
