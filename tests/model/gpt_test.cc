// Whole-model tests: the oneDNN model against the naive double reference (forward,
// and gradients by central differences), recompute, bf16, grad_ready, bad configs,
// and a tiny model memorising a text.
#include "model/gpt.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bf16_paths.h"
#include "isa_paths.h"
#include "model/kernels.h"
#include "model/model_test_util.h"
#include "model/reference_gpt.h"

namespace rt::model {
namespace {

using testing::Batch;
using testing::Bf16Refused;
using testing::MakeGpt;
using testing::RandomBatch;
using testing::TestParams;

const GptConfig kTiny{/*vocab*/ 11, /*layers*/ 2, /*heads*/ 2, /*dim*/ 8, /*seq_len*/ 4};

TEST_CASE("Create rejects bad configs with clear messages") {
  auto bad = [](GptConfig c, const char* want) {
    auto g = Gpt::Create(c, GptOptions{});
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().message().find(want) != absl::string_view::npos);
  };
  bad(GptConfig{100, 2, 3, 100, 16}, "dim 100 is not divisible by heads 3");
  bad(GptConfig{0, 2, 2, 8, 16}, "vocab must be positive");
  bad(GptConfig{10, -1, 2, 8, 16}, "layers must be positive");
  bad(GptConfig{10, 2, 0, 8, 16}, "heads must be positive");
  bad(GptConfig{10, 2, 2, 0, 16}, "dim must be positive");
  bad(GptConfig{10, 2, 2, 8, 0}, "seq_len must be positive");
  auto g = Gpt::Create(kTiny, GptOptions{Precision::kFp32, false, 0});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("max_batch") != absl::string_view::npos);
  g = Gpt::Create(kTiny, GptOptions{Precision::kFp32, false, 1, -4});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("attention_block") != absl::string_view::npos);
  g = Gpt::Create(kTiny, GptOptions{Precision::kFp32, false, 1, 0, -1});
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().message().find("lm_head_chunk_floats") != absl::string_view::npos);
  CHECK(ParsePrecision("fp16").status().message().find("fp16") != absl::string_view::npos);
  CHECK(ParsePrecision("fp32").value() == Precision::kFp32);
  CHECK(ParsePrecision("bf16").value() == Precision::kBf16);
  CHECK(ParsePrecision("auto").ok());
}

TEST_CASE("layout: aligned, disjoint, in order, flop params exclude wpe") {
  GptConfig c{50, 3, 2, 12, 7};
  ParamLayout l(c);
  size_t end = 0, sum = 0;
  for (const TensorView& t : l.tensors()) {
    CHECK(t.offset % 16 == 0);
    CHECK(t.offset >= end);
    end = t.offset + t.count;
    sum += t.count;
  }
  CHECK(end <= l.total_floats());
  CHECK(l.flop_params() == sum - 7 * 12);
  CHECK(l.block_begin(0) >= l.wpe() + 7 * 12);
  CHECK(l.block_begin(3) == l.lnf_w());
  CHECK(c.ToString() == "layers=3 heads=2 dim=12 seq_len=7 vocab=50");
}

TEST_CASE("fp32 loss, logits and every gradient match the double reference") {
  const int B = 2, T = kTiny.seq_len;
  // Attention in one block (auto at this length), in blocks of 1 row (exactly the
  // causal triangle) and of 3 (a ragged last block).
  int block = 0;
  SUBCASE("whole rows") { block = 0; }
  SUBCASE("blocks of 1") { block = 1; }
  SUBCASE("blocks of 3") { block = 3; }
  CAPTURE(block);
  auto g = MakeGpt(kTiny, Precision::kFp32, false, B, block);
  std::vector<float> p = TestParams(*g, 7);
  Batch batch = RandomBatch(kTiny, B, T, 3);
  std::vector<float> grads(p.size(), 0.0f);
  const double loss = g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 1.0f,
                                         absl::MakeSpan(grads));

  std::vector<double> pd(p.begin(), p.end());
  std::vector<double> ref_logits;
  const double ref = testing::ReferenceLoss(kTiny, g->layout(), pd, batch.tokens.data(),
                                            batch.targets.data(), B, T, &ref_logits);
  CHECK(loss == doctest::Approx(ref).epsilon(1e-5));
  CHECK(g->Loss(p, batch.tokens.data(), batch.targets.data(), B) ==
        doctest::Approx(ref).epsilon(1e-5));

  // Last-position logits of every prefix length (causality + LastLogits).
  for (int t = 1; t <= T; ++t) {
    std::vector<int32_t> prefix;
    for (int b = 0; b < B; ++b) {
      prefix.insert(prefix.end(), batch.tokens.begin() + b * T, batch.tokens.begin() + b * T + t);
    }
    std::vector<float> logits(B * kTiny.vocab_size);
    g->LastLogits(p, prefix.data(), B, t, logits.data());
    for (int b = 0; b < B; ++b) {
      for (int v = 0; v < kTiny.vocab_size; ++v) {
        CHECK(logits[b * kTiny.vocab_size + v] ==
              doctest::Approx(ref_logits[(b * T + t - 1) * kTiny.vocab_size + v]).epsilon(1e-4));
      }
    }
  }

  // Central differences of the double reference: error O(h^2) ~ 1e-8, far below float noise.
  const double h = 1e-4;
  double max_err = 0.0;
  for (size_t i = 0; i < pd.size(); ++i) {
    const double keep = pd[i];
    pd[i] = keep + h;
    const double up = testing::ReferenceLoss(kTiny, g->layout(), pd, batch.tokens.data(),
                                             batch.targets.data(), B, T);
    pd[i] = keep - h;
    const double down = testing::ReferenceLoss(kTiny, g->layout(), pd, batch.tokens.data(),
                                               batch.targets.data(), B, T);
    pd[i] = keep;
    const double fd = (up - down) / (2 * h);
    // Float model: absolute 1e-4 plus 1e-3 relative covers fp32 rounding over this depth.
    const double err = std::abs(fd - grads[i]) / (1e-4 + 1e-3 * std::abs(fd));
    max_err = std::max(max_err, err);
    if (err > 1.0) {
      INFO("param ", i, " fd ", fd, " model ", grads[i]);
      CHECK(err <= 1.0);
    }
  }
  MESSAGE("max normalised gradient error ", max_err);
  // Padding between tensors never receives gradient.
  std::vector<bool> used(p.size(), false);
  for (const TensorView& t : g->layout().tensors()) {
    for (size_t i = 0; i < t.count; ++i) used[t.offset + i] = true;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (!used[i]) CHECK(grads[i] == 0.0f);
  }
}

// Larger shapes take oneDNN's blocked (brgemm) paths: check the gradient along random
// directions against central differences of the double reference.
TEST_CASE("fp32 gradient matches reference directional derivatives at a larger shape") {
#ifdef RINGTRAIN_SANITIZED
  const GptConfig c{64, 2, 4, 64, 32};
#else
  const GptConfig c{200, 2, 4, 128, 64};
#endif
  const int B = 2, T = c.seq_len;
  // Whole rows (auto at this length), and blocks of 16 rows: four blocked matmuls each.
  int block = 0;
  SUBCASE("whole rows") { block = 0; }
  SUBCASE("blocks of 16") { block = 16; }
  CAPTURE(block);
  auto g = MakeGpt(c, Precision::kFp32, false, B, block);
  std::vector<float> p(g->layout().total_floats());
  g->InitParams(absl::MakeSpan(p), 11);
  for (float& x : p) x *= 2.0f;
  Batch batch = RandomBatch(c, B, T, 5);
  std::vector<float> grads(p.size(), 0.0f);
  const double loss = g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 0.5f,
                                         absl::MakeSpan(grads));
  std::vector<double> pd(p.begin(), p.end());
  CHECK(loss == doctest::Approx(testing::ReferenceLoss(c, g->layout(), pd, batch.tokens.data(),
                                                       batch.targets.data(), B, T))
                    .epsilon(1e-5));
  std::mt19937 rng(9);
  std::normal_distribution<double> n01;
  for (int trial = 0; trial < 3; ++trial) {
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
    const double fd = 0.5 *  // grad_scale 0.5
                      (testing::ReferenceLoss(c, g->layout(), up, batch.tokens.data(),
                                              batch.targets.data(), B, T) -
                       testing::ReferenceLoss(c, g->layout(), down, batch.tokens.data(),
                                              batch.targets.data(), B, T)) /
                      (2 * h);
    CHECK(dot == doctest::Approx(fd).epsilon(2e-3));
  }
}

TEST_CASE("recompute gives bit-identical gradients and loss") {
  const GptConfig c{40, 3, 2, 32, 16};
  const int B = 2;
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    if (Bf16Refused(c, prec, B)) continue;
    auto g = MakeGpt(c, prec, false, B);
    auto gr = MakeGpt(c, prec, true, B);
    std::vector<float> p(g->layout().total_floats());
    g->InitParams(absl::MakeSpan(p), 1);
    Batch batch = RandomBatch(c, B, c.seq_len, 2);
    std::vector<float> a(p.size(), 0.0f), b(p.size(), 0.0f);
    const double la = g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 1.0f,
                                         absl::MakeSpan(a));
    const double lb = gr->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 1.0f,
                                          absl::MakeSpan(b));
    CHECK(la == lb);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    CHECK(gr->ActivationBytes() < g->ActivationBytes());
  }
}

TEST_CASE("ForwardBackward accumulates and honours grad_scale") {
  const GptConfig c{30, 1, 2, 16, 8};
  auto g = MakeGpt(c, Precision::kFp32, false, 1);
  std::vector<float> p(g->layout().total_floats());
  g->InitParams(absl::MakeSpan(p), 3);
  Batch batch = RandomBatch(c, 1, c.seq_len, 4);
  std::vector<float> once(p.size(), 0.0f), twice(p.size(), 0.0f);
  g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 1, 2.0f, absl::MakeSpan(once));
  g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 1, 1.0f, absl::MakeSpan(twice));
  g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 1, 1.0f, absl::MakeSpan(twice));
  for (size_t i = 0; i < p.size(); ++i) {
    CHECK(twice[i] == doctest::Approx(once[i]).epsilon(1e-5).scale(1e-6));
  }
}

TEST_CASE("grad_ready offsets are monotone, end at 0, and each suffix is final") {
  const GptConfig c{30, 3, 2, 16, 8};
  auto g = MakeGpt(c, Precision::kFp32, false, 2);
  std::vector<float> p(g->layout().total_floats());
  g->InitParams(absl::MakeSpan(p), 3);
  Batch batch = RandomBatch(c, 2, c.seq_len, 4);
  std::vector<float> grads(p.size(), 0.0f);
  std::vector<size_t> offsets;
  std::vector<std::vector<float>> snapshots;
  g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 2, 1.0f, absl::MakeSpan(grads),
                     [&](size_t o) {
                       offsets.push_back(o);
                       snapshots.emplace_back(grads.begin() + o, grads.end());
                     });
  REQUIRE(offsets.size() == static_cast<size_t>(c.n_layers + 2));
  CHECK(offsets.back() == 0);
  CHECK(offsets.front() == g->layout().block_begin(c.n_layers));
  for (size_t i = 1; i < offsets.size(); ++i) CHECK(offsets[i] < offsets[i - 1]);
  for (size_t i = 0; i < offsets.size(); ++i) {
    CHECK(std::memcmp(snapshots[i].data(), grads.data() + offsets[i],
                      snapshots[i].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("bf16 loss and gradients stay close to fp32") {
  const GptConfig c{64, 2, 2, 64, 32};
  const int B = 2;
  // fp32 in whole rows against bf16 in whole rows and in blocks of 8.
  int block = 0;
  SUBCASE("whole rows") { block = 0; }
  SUBCASE("blocks of 8") { block = 8; }
  CAPTURE(block);
  if (Bf16Refused(c, Precision::kBf16, B, block)) return;
  auto g32 = MakeGpt(c, Precision::kFp32, false, B);
  auto g16 = MakeGpt(c, Precision::kBf16, false, B, block);
  std::vector<float> p(g32->layout().total_floats());
  g32->InitParams(absl::MakeSpan(p), 21);
  for (float& x : p) x *= 3.0f;
  Batch batch = RandomBatch(c, B, c.seq_len, 22);
  std::vector<float> a(p.size(), 0.0f), b(p.size(), 0.0f);
  const double la = g32->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 1.0f,
                                         absl::MakeSpan(a));
  const double lb = g16->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), B, 1.0f,
                                         absl::MakeSpan(b));
  CHECK(lb == doctest::Approx(la).epsilon(0.02));
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  CHECK(dot / std::sqrt(na * nb) > 0.99);
}

TEST_CASE("out-of-range tokens or wrong sizes give NaN and leave grads untouched") {
  auto g = MakeGpt(kTiny, Precision::kFp32, false, 1);
  std::vector<float> p(g->layout().total_floats()), grads(p.size(), 0.0f);
  g->InitParams(absl::MakeSpan(p), 1);
  std::vector<int32_t> tok = {1, 2, 11, 3}, tgt = {1, 2, 3, 4};
  CHECK(std::isnan(g->ForwardBackward(p, tok.data(), tgt.data(), 1, 1.0f, absl::MakeSpan(grads))));
  tok[2] = -1;
  CHECK(std::isnan(g->Loss(p, tok.data(), tgt.data(), 1)));
  tok[2] = 0;
  CHECK(std::isnan(g->ForwardBackward(p, tok.data(), tgt.data(), 2, 1.0f, absl::MakeSpan(grads))));
  for (float x : grads) CHECK(x == 0.0f);
  CHECK(std::isfinite(g->Loss(p, tok.data(), tgt.data(), 1)));
}

// Plain Adam inside the test: a tiny model must memorise one short text.
TEST_CASE("a tiny model memorises a short text") {
  const std::string text = "the quick brown fox jumps over the lazy dog again";
  const int T = static_cast<int>(text.size()) - 1;
  const GptConfig c{128, 2, 2, 32, T};
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    if (Bf16Refused(c, prec, 1)) continue;
    auto g = MakeGpt(c, prec, false, 1);
    std::vector<float> p(g->layout().total_floats()), grads(p.size()), m(p.size()), v(p.size());
    g->InitParams(absl::MakeSpan(p), 5);
    std::vector<int32_t> tok(T), tgt(T);
    for (int t = 0; t < T; ++t) {
      tok[t] = static_cast<unsigned char>(text[t]);
      tgt[t] = static_cast<unsigned char>(text[t + 1]);
    }
    double loss = 0;
    for (int step = 1; step <= 300; ++step) {
      std::fill(grads.begin(), grads.end(), 0.0f);
      loss = g->ForwardBackward(p, tok.data(), tgt.data(), 1, 1.0f / T, absl::MakeSpan(grads)) / T;
      if (loss < 0.05) break;
      const float lr = 1e-2f, b1 = 0.9f, b2 = 0.99f;
      for (size_t i = 0; i < p.size(); ++i) {
        m[i] = b1 * m[i] + (1 - b1) * grads[i];
        v[i] = b2 * v[i] + (1 - b2) * grads[i] * grads[i];
        const float mh = m[i] / (1 - std::pow(b1, step)), vh = v[i] / (1 - std::pow(b2, step));
        p[i] -= lr * mh / (std::sqrt(vh) + 1e-8f);
      }
    }
    INFO(PrecisionName(prec));
    CHECK(loss < 0.1);
  }
}

}  // namespace
}  // namespace rt::model

namespace rt::model {
namespace {

using testing::Batch;
using testing::Bf16Refused;
using testing::MakeGpt;
using testing::RandomBatch;
using testing::TestParams;

TEST_CASE("every kernel path gives the same model results as the best one") {
  const GptConfig c{50, 2, 2, 32, 16};
  auto g = MakeGpt(c, Precision::kFp32, false, 2);
  std::vector<float> p = TestParams(*g, 4);
  Batch batch = RandomBatch(c, 2, c.seq_len, 6);
  std::vector<float> a(p.size(), 0.0f), b(p.size(), 0.0f);
  const double la =
      g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 2, 1.0f, absl::MakeSpan(a));
  RT_EVERY_KERNEL_PATH();
  const double lb =
      g->ForwardBackward(p, batch.tokens.data(), batch.targets.data(), 2, 1.0f, absl::MakeSpan(b));
  CHECK(lb == doctest::Approx(la).epsilon(1e-5));
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-3).scale(1e-3));
  }
}

}  // namespace
}  // namespace rt::model
