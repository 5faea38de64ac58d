// Sampling: greedy and top-1 pick the argmax, top-k never leaves the k best, the
// draws follow softmax(logits / temperature), the same seed gives the same text.
#include "train/text_generator.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "model/gpt.h"
#include "train/train_test_util.h"

using rt::train::SampleFromLogits;

TEST_CASE("temperature 0 and top-k 1 pick the most likely id (lower id on ties)") {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  uint64_t rng = 1;
  CHECK(SampleFromLogits(logits, 0.0f, 0, &rng) == 1);
  for (int i = 0; i < 20; ++i) CHECK(SampleFromLogits(logits, 1.0f, 1, &rng) == 1);
}

TEST_CASE("Argmax is exact: the largest logit, the lowest id on ties, never NaN") {
  const float nan = std::nanf("");
  CHECK(rt::train::Argmax(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
  CHECK(rt::train::Argmax(std::vector<float>{nan, -5.0f, nan, -4.0f}) == 3);
  CHECK(rt::train::Argmax(std::vector<float>{nan, nan}) == 0);
  // Neighbouring floats are told apart: no tolerance, no rounding.
  const float a = 0.1f, b = std::nextafter(a, 1.0f);
  CHECK(rt::train::Argmax(std::vector<float>{a, b, a}) == 1);
  CHECK(rt::train::Argmax(std::vector<float>{-0.0f, 0.0f}) == 0);  // -0 == +0: a tie
  uint64_t rng = 7;
  for (int top_k : {0, 1, 3}) {
    CHECK(SampleFromLogits(std::vector<float>{a, b, a}, 0.0f, top_k, &rng) == 1);
  }
}

TEST_CASE("top-k keeps only the k most likely ids") {
  std::vector<float> logits = {5.0f, 4.9f, 4.8f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  uint64_t rng = 2;
  for (int i = 0; i < 500; ++i) CHECK(SampleFromLogits(logits, 5.0f, 3, &rng) < 3);
}

TEST_CASE("draws follow softmax(logits / temperature)") {
  std::vector<float> logits = {std::log(1.0f), std::log(2.0f),
                               std::log(5.0f)};  // p = .125 .25 .625
  uint64_t rng = 3;
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[SampleFromLogits(logits, 1.0f, 0, &rng)]++;
  CHECK(counts[0] / double(n) == doctest::Approx(0.125).epsilon(0.08));
  CHECK(counts[1] / double(n) == doctest::Approx(0.25).epsilon(0.05));
  CHECK(counts[2] / double(n) == doctest::Approx(0.625).epsilon(0.03));
  // Temperature 0.5 squares the odds: p ∝ 1, 4, 25.
  int hot = 0;
  for (int i = 0; i < n; ++i) hot += SampleFromLogits(logits, 0.5f, 0, &rng) == 2;
  CHECK(hot / double(n) == doctest::Approx(25.0 / 30.0).epsilon(0.03));
}

TEST_CASE("Generate is deterministic for a seed, slides past seq_len, stops at stop_id") {
  rt::train::testing::UseOneThread();
  rt::model::GptConfig c;
  c.vocab_size = 20;
  c.n_layers = 1;
  c.n_heads = 2;
  c.dim = 16;
  c.seq_len = 8;
  auto gpt = rt::model::Gpt::Create(c, {});
  REQUIRE(gpt.ok());
  std::vector<float> params((*gpt)->layout().total_floats());
  (*gpt)->InitParams(absl::MakeSpan(params), 5);
  rt::train::SampleOptions o;
  o.max_new_tokens = 30;  // longer than seq_len: the window slides
  o.temperature = 1.0f;
  o.top_k = 0;
  auto a = rt::train::Generate(**gpt, params, {1, 2, 3}, 0, o);
  auto b = rt::train::Generate(**gpt, params, {1, 2, 3}, 0, o);
  CHECK(a.size() == 30);
  CHECK(a == b);
  for (int id : a) CHECK((id >= 0 && id < 20));
  o.seed = 99;
  CHECK(rt::train::Generate(**gpt, params, {1, 2, 3}, 0, o) != a);
  o.seed = 1337;
  o.stop_id = a[4];
  auto stopped = rt::train::Generate(**gpt, params, {1, 2, 3}, 0, o);
  CHECK(stopped.size() <= 5);
  CHECK(stopped.back() == a[4]);
  // An empty prompt starts from start_id.
  CHECK(rt::train::Generate(**gpt, params, {}, 7, o).size() >= 1);
}
