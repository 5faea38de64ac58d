// Whole-model checks of the shape-dependent choices no small test reaches: the LM head
// computed in several row chunks (large vocabularies), and the automatic attention block
// size (attention_block = 0) following AttentionBlock's documented rule.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/causal_attention.h"
#include "model/gpt.h"
#include "model/reference_gpt.h"

namespace rt::model {
namespace {

std::unique_ptr<Gpt> Make(const GptConfig& c, int max_batch, int attention_block,
                          int64_t lm_head_chunk_floats = 0) {
  auto g = Gpt::Create(
      c, GptOptions{Precision::kFp32, false, max_batch, attention_block, lm_head_chunk_floats});
  REQUIRE_MESSAGE(g.ok(), g.status().ToString());
  return std::move(g).value();
}

// Random tokens and targets (B*T each) in [0, vocab).
void RandomTokens(const GptConfig& c, int B, uint32_t seed, std::vector<int32_t>* tokens,
                  std::vector<int32_t>* targets) {
  std::mt19937 rng(seed);
  for (int i = 0; i < B * c.seq_len; ++i) {
    tokens->push_back(static_cast<int32_t>(rng() % c.vocab_size));
    targets->push_back(static_cast<int32_t>(rng() % c.vocab_size));
  }
}

TEST_CASE("LM head in several chunks: loss and gradient match the double reference") {
  // Logit rows are computed in chunks of about lm_head_chunk_floats (gpt.cc; 16M by
  // default, which only a vocabulary of tens of thousands reaches, and a double
  // reference of that size takes most of a minute): 32768 / 256 = 128 rows at most, so
  // 5 x 64 = 320 rows take three chunks (128, 128, then a ragged 64).
  const GptConfig c{256, 1, 2, 8, 64};  // vocab, layers, heads, dim, seq_len
  const int B = 5;
  const int64_t chunk_floats = 32768;
  REQUIRE(int64_t{B} * c.seq_len > 2 * chunk_floats / c.vocab_size);
  auto g = Make(c, B, 0, chunk_floats);
  std::vector<float> p(g->layout().total_floats());
  g->InitParams(absl::MakeSpan(p), 31);
  for (float& x : p) x *= 4.0f;  // logits far from uniform: every chunk's rows matter
  std::vector<int32_t> tokens, targets;
  RandomTokens(c, B, 32, &tokens, &targets);
  std::vector<float> grads(p.size(), 0.0f);
  const double loss =
      g->ForwardBackward(p, tokens.data(), targets.data(), B, 1.0f, absl::MakeSpan(grads));
  std::vector<double> pd(p.begin(), p.end());
  const double ref =
      testing::ReferenceLoss(c, g->layout(), pd, tokens.data(), targets.data(), B, c.seq_len);
  CHECK(loss == doctest::Approx(ref).epsilon(1e-5));
  CHECK(g->Loss(p, tokens.data(), targets.data(), B) == doctest::Approx(ref).epsilon(1e-5));
  // The directional derivative along a random direction over all parameters (the
  // token embedding, the tied LM head's weight, included), by central differences of
  // the reference.
  std::mt19937 rng(33);
  std::normal_distribution<double> n01;
  std::vector<double> u(pd.size());
  double dot = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    u[i] = n01(rng);
    dot += u[i] * grads[i];
  }
  const double h = 1e-5;
  std::vector<double> up = pd, down = pd;
  for (size_t i = 0; i < u.size(); ++i) {
    up[i] += h * u[i];
    down[i] -= h * u[i];
  }
  const double fd =
      (testing::ReferenceLoss(c, g->layout(), up, tokens.data(), targets.data(), B, c.seq_len) -
       testing::ReferenceLoss(c, g->layout(), down, tokens.data(), targets.data(), B, c.seq_len)) /
      (2 * h);
  CHECK(dot == doctest::Approx(fd).epsilon(2e-3));
}

TEST_CASE("attention block 0 picks AttentionBlock(seq_len) -- the documented rule") {
  // T itself below 256, else about T/4 in multiples of 64, from 128 to 256 rows.
  CHECK(AttentionBlock(1) == 1);
  CHECK(AttentionBlock(64) == 64);
  CHECK(AttentionBlock(255) == 255);
  CHECK(AttentionBlock(256) == 128);
  CHECK(AttentionBlock(512) == 128);
  CHECK(AttentionBlock(768) == 192);
  CHECK(AttentionBlock(1024) == 256);
  CHECK(AttentionBlock(4096) == 256);
}

TEST_CASE("attention block 0 gives the explicit blocks' result bit for bit") {
  // seq_len 256: auto picks 128-row blocks. The same bits as asking for 128, and the
  // whole-rows result (256) up to float rounding (here oneDNN gives whole rows the
  // same bits too; blocks of a few rows do not).
  const GptConfig c{32, 1, 2, 16, 256};
  const int B = 1;
  auto automatic = Make(c, B, 0), blocks = Make(c, B, 128), whole = Make(c, B, 256);
  std::vector<float> p(automatic->layout().total_floats());
  automatic->InitParams(absl::MakeSpan(p), 41);
  for (float& x : p) x *= 3.0f;
  std::vector<int32_t> tokens, targets;
  RandomTokens(c, B, 42, &tokens, &targets);
  std::vector<float> ga(p.size(), 0.0f), gb(p.size(), 0.0f), gw(p.size(), 0.0f);
  const double la =
      automatic->ForwardBackward(p, tokens.data(), targets.data(), B, 1.0f, absl::MakeSpan(ga));
  const double lb =
      blocks->ForwardBackward(p, tokens.data(), targets.data(), B, 1.0f, absl::MakeSpan(gb));
  const double lw =
      whole->ForwardBackward(p, tokens.data(), targets.data(), B, 1.0f, absl::MakeSpan(gw));
  CHECK(la == lb);
  CHECK(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)) == 0);
  CHECK(la == doctest::Approx(lw).epsilon(1e-5));
  double max_rel = 0, max_abs = 0;
  for (size_t i = 0; i < ga.size(); ++i) max_abs = std::max(max_abs, std::fabs(double{gw[i]}));
  for (size_t i = 0; i < ga.size(); ++i) {
    max_rel = std::max(max_rel, std::fabs(double{ga[i]} - gw[i]) / max_abs);
  }
  CHECK(max_rel < 1e-4);
}

}  // namespace
}  // namespace rt::model
