// AdamW's preconditioned steps (top-k with error feedback): Precondition divides by the
// frozen denominators with the per-block floor, gives the same bits whatever ranges the
// caller cuts, and StepPreconditioned continues the dense steps' momentum, leaves v
// frozen and equals a double-precision reference; where the sum was dense (auto's
// none/bf16 buckets) it takes Adam's own steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/adamw.h"
#include "random_vector.h"

namespace {

using rt::optim::AdamW;
using rt::optim::AdamWConfig;
using rt::optim::FloatRange;
using rt::testing::GaussianVector;

// The frozen denominators of optim/adamw.h in double, from v after `frozen_t` steps.
std::vector<double> ReferenceDenominators(const std::vector<double>& v, const AdamWConfig& c,
                                          int64_t frozen_t) {
  const double bc2 = 1 - std::pow(static_cast<double>(c.beta2), static_cast<double>(frozen_t));
  const size_t block = AdamW::kPreconditionBlock;
  std::vector<double> d(v.size());
  for (size_t b = 0; b < v.size(); b += block) {
    const size_t e = std::min(v.size(), b + block);
    double sum = 0;
    for (size_t i = b; i < e; ++i) sum += v[i] / bc2;
    const double floor = AdamW::kPreconditionFloor * std::sqrt(sum / static_cast<double>(e - b));
    for (size_t i = b; i < e; ++i) d[i] = std::max(std::sqrt(v[i] / bc2), floor) + c.eps;
  }
  return d;
}

}  // namespace

TEST_CASE("preconditioned steps continue dense AdamW like a double-precision reference") {
  const size_t n = 2 * AdamW::kPreconditionBlock + 77;  // blocks and a ragged end
  AdamWConfig c;
  c.weight_decay = 0.2f;
  const std::vector<FloatRange> decay = {{10, 5000}};
  AdamW opt(c, n, decay);
  std::vector<float> p = GaussianVector(n, 1, 0.02f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
  // A stretch of coordinates with no gradient during the dense steps: v = 0 there, so
  // only the block floor keeps their later gradients from being divided by eps.
  auto dense_grad = [&](int t) {
    std::vector<float> g = GaussianVector(n, 100 + t, 1e-3f);
    for (size_t i = 6000; i < 6100; ++i) g[i] = 0;
    return g;
  };
  const int64_t frozen_t = 3;
  const double lr = 1e-2;
  for (int64_t t = 1; t <= frozen_t; ++t) {
    std::vector<float> g = dense_grad(static_cast<int>(t));
    opt.Step(absl::MakeSpan(p), g, static_cast<float>(lr), t);
    for (size_t i = 0; i < n; ++i) {
      if (i >= 10 && i < 5000) rp[i] -= lr * c.weight_decay * rp[i];
      rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * g[i];
      rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * static_cast<double>(g[i]) * g[i];
      const double mhat = rm[i] / (1 - std::pow(c.beta1, t));
      const double vhat = rv[i] / (1 - std::pow(c.beta2, t));
      rp[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
    }
  }
  const std::vector<float> v_frozen(opt.v().begin(), opt.v().end());
  const std::vector<double> d = ReferenceDenominators(rv, c, frozen_t);
  for (size_t i = 0; i < n; ++i) rm[i] /= d[i];  // the momentum carried into the new units

  double max_rel = 0;
  for (int64_t t = frozen_t + 1; t <= frozen_t + 4; ++t) {
    std::vector<float> g = GaussianVector(n, 200 + static_cast<uint32_t>(t), 1e-3f);
    std::vector<double> gd(g.begin(), g.end());
    opt.Precondition(absl::MakeSpan(g), 0, frozen_t);
    for (size_t i = 0; i < n; ++i) {
      gd[i] /= d[i];
      max_rel = std::max(max_rel, std::fabs(g[i] - gd[i]) / std::max(std::fabs(gd[i]), 1e-30));
    }
    opt.StepPreconditioned(absl::MakeSpan(p), absl::MakeSpan(g), static_cast<float>(lr), t,
                           frozen_t);
    for (size_t i = 0; i < n; ++i) {
      if (i >= 10 && i < 5000) rp[i] -= lr * c.weight_decay * rp[i];
      rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * gd[i];
      rp[i] -= lr / (1 - std::pow(c.beta1, t)) * rm[i];
    }
  }
  CHECK(max_rel < 1e-5);
  CHECK(std::equal(v_frozen.begin(), v_frozen.end(), opt.v().begin()));  // v stays frozen
  double max_diff = 0;
  for (size_t i = 0; i < n; ++i) max_diff = std::max(max_diff, std::fabs(p[i] - rp[i]));
  MESSAGE("preconditioned AdamW vs reference: max |diff| ", max_diff);
  CHECK(max_diff < 1e-5);
  // The floor bounds what a coordinate silent during the dense steps receives: a
  // gradient of its block's typical size (rms 1e-3) becomes 1 / kPreconditionFloor,
  // not 1e-3 / eps = 1e5.
  std::vector<float> probe(100, 1e-3f);
  opt.Precondition(absl::MakeSpan(probe), 6000, frozen_t);
  CHECK(probe[0] == doctest::Approx(1e-3 / d[6000]).epsilon(1e-5));
  CHECK(probe[0] > 0.8f / AdamW::kPreconditionFloor);
  CHECK(probe[0] < 1.2f / AdamW::kPreconditionFloor);
}

TEST_CASE("Precondition gives the same bits whatever ranges the caller cuts") {
  const size_t n = AdamW::kPreconditionBlock + 1000;
  AdamWConfig c;
  AdamW opt(c, n, {});
  std::vector<float> p(n, 0.0f);
  opt.Step(absl::MakeSpan(p), GaussianVector(n, 5, 1.0f), 1e-3f, 1);
  const std::vector<float> g = GaussianVector(n, 6, 1.0f);
  std::vector<float> whole = g;
  opt.Precondition(absl::MakeSpan(whole), 0, 1);
  std::vector<float> pieces = g;
  const size_t cuts[] = {0,     1000, AdamW::kPreconditionBlock, AdamW::kPreconditionBlock + 1,
                         n - 3, n};
  for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
    opt.Precondition(absl::MakeSpan(pieces).subspan(cuts[k], cuts[k + 1] - cuts[k]), cuts[k], 1);
  }
  CHECK(std::equal(whole.begin(), whole.end(), pieces.begin()));
  CHECK(whole != g);
}

TEST_CASE(
    "a preconditioned step goes on learning v where the sum was dense, nowhere else, and "
    "divides those gradients by the denominator that includes them") {
  const size_t n = AdamW::kPreconditionBlock + 500;  // the dense range crosses a block edge
  AdamWConfig c;
  AdamW opt(c, n, {});
  std::vector<float> p(n, 0.0f);
  const int64_t frozen_t = 2;
  for (int64_t t = 1; t <= frozen_t; ++t) {
    opt.Step(absl::MakeSpan(p), GaussianVector(n, 40 + static_cast<uint32_t>(t), 1e-3f), 1e-3f, t);
  }
  const std::vector<double> v0(opt.v().begin(), opt.v().end());
  const std::vector<double> d = ReferenceDenominators(v0, c, frozen_t);
  const std::vector<FloatRange> dense = {{100, 200}, {AdamW::kPreconditionBlock - 50, n - 10}};
  std::vector<float> g = GaussianVector(n, 50, 1e-3f);
  g[150] = 1e3f;  // a spike inside a dense range
  opt.Precondition(absl::MakeSpan(g), 0, frozen_t);
  const std::vector<float> pre = g;
  opt.StepPreconditioned(absl::MakeSpan(p), absl::MakeSpan(g), 1e-3f, frozen_t + 1, frozen_t,
                         dense);
  const double bc2 = 1 - std::pow(static_cast<double>(c.beta2), static_cast<double>(frozen_t));
  auto in_dense = [&](size_t i) {
    for (const FloatRange& r : dense) {
      if (i >= r.first && i < r.second) return true;
    }
    return false;
  };
  double max_rel = 0, max_g_rel = 0;
  size_t updated = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!in_dense(i)) {
      REQUIRE(opt.v()[i] == static_cast<float>(v0[i]));  // frozen
      REQUIRE(g[i] == pre[i]);                           // as summed
      continue;
    }
    // The peers' summed gradient is g * d; v keeps the biased scale of the dense steps.
    const double raw = static_cast<double>(pre[i]) * d[i];
    const double want = c.beta2 * v0[i] + (1 - c.beta2) * bc2 * raw * raw;
    max_rel = std::max(max_rel, std::fabs(opt.v()[i] - want) / want);
    // ... and the gradient is divided by Adam's new denominator (no block floor).
    const double d_new = std::sqrt(want / bc2) + c.eps;
    max_g_rel = std::max(max_g_rel, std::fabs(g[i] - raw / d_new) / std::fabs(raw / d_new));
    ++updated;
  }
  CHECK(updated == 100 + (n - 10 - (AdamW::kPreconditionBlock - 50)));
  MESSAGE("v learned on dense ranges: max relative error ", max_rel, ", gradients ", max_g_rel);
  CHECK(max_rel < 1e-5);
  CHECK(max_g_rel < 1e-5);
  // The spike: Adam's self-normalisation bounds it by 1 / sqrt(1 - b2).
  CHECK(pre[150] > 1e5f);
  CHECK(std::fabs(g[150]) <= 1 / std::sqrt(1 - c.beta2) * 1.0001);
}

TEST_CASE(
    "where every sum is dense, preconditioned steps are Adam's steps, floored coordinates too") {
  // auto's none/bf16 buckets go through StepPreconditioned after the warm-up: the
  // peers divide by the floored frozen denominators before the exchange, and the step
  // must undo that and take Adam's update (measured: with the floor and momentum in
  // floored units, such a run ended 0.68% above dense instead of -0.03%).
  const size_t n = AdamW::kPreconditionBlock + 300;
  AdamWConfig c;
  c.weight_decay = 0.1f;
  AdamW opt(c, n, {{0, 1000}});
  std::vector<float> p = GaussianVector(n, 3, 0.02f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
  const int64_t frozen_t = 4;
  const double lr = 1e-2;
  const size_t quiet_begin = 2000, quiet_end = 2100;  // tiny v: the floor binds there
  auto grad = [&](int64_t t) {
    std::vector<float> g = GaussianVector(n, 300 + static_cast<uint32_t>(t), 1e-3f);
    if (t <= frozen_t) {
      for (size_t i = quiet_begin; i < quiet_end; ++i) g[i] *= 1e-3f;
    }
    return g;
  };
  auto reference_step = [&](const std::vector<float>& g, int64_t t, double vhat_scale) {
    for (size_t i = 0; i < n; ++i) {
      if (i < 1000) rp[i] -= lr * c.weight_decay * rp[i];
      rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * g[i];
      rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * vhat_scale * static_cast<double>(g[i]) * g[i];
      const double mhat = rm[i] / (1 - std::pow(c.beta1, t));
      const double bc2 = t <= frozen_t ? 1 - std::pow(c.beta2, t) : vhat_scale;
      rp[i] -= lr * mhat / (std::sqrt(rv[i] / bc2) + c.eps);
    }
  };
  for (int64_t t = 1; t <= frozen_t; ++t) {
    const std::vector<float> g = grad(t);
    opt.Step(absl::MakeSpan(p), g, static_cast<float>(lr), t);
    reference_step(g, t, 1.0);
  }
  // Adam's v from here on: an average that started at the warm-up's unbiased estimate
  // (the scale the frozen coordinates keep; the same as Adam's once b2^t is negligible).
  const double bc2_frozen = 1 - std::pow(static_cast<double>(c.beta2), frozen_t);
  const std::vector<double> d = ReferenceDenominators(rv, c, frozen_t);
  int floored = 0;
  for (size_t i = quiet_begin; i < quiet_end; ++i) {
    floored += d[i] > 2 * (std::sqrt(rv[i] / bc2_frozen) + c.eps);
  }
  REQUIRE(floored == 100);  // the floor matters there
  const std::vector<FloatRange> all = {{0, n}};
  for (int64_t t = frozen_t + 1; t <= frozen_t + 6; ++t) {
    const std::vector<float> g = grad(t);
    std::vector<float> pre = g;
    opt.Precondition(absl::MakeSpan(pre), 0, frozen_t);
    opt.StepPreconditioned(absl::MakeSpan(p), absl::MakeSpan(pre), static_cast<float>(lr), t,
                           frozen_t, all);
    reference_step(g, t, bc2_frozen);
  }
  double max_diff = 0, max_quiet = 0;
  for (size_t i = 0; i < n; ++i) max_diff = std::max(max_diff, std::fabs(p[i] - rp[i]));
  for (size_t i = quiet_begin; i < quiet_end; ++i) {
    max_quiet = std::max(max_quiet, std::fabs(p[i] - rp[i]));
  }
  MESSAGE("dense sums through preconditioned steps vs Adam: max |diff| ", max_diff,
          ", floored coordinates ", max_quiet);
  CHECK(max_diff < 1e-5);
  CHECK(max_quiet < 1e-5);
}

TEST_CASE("refresh steps let v learn and keep top-k's momentum in floored units") {
  // Fixed top-k with --topk-refresh: preconditioned steps with v frozen, and every few
  // steps one whose sum is dense and exact (refreshed): the coordinate takes top-k's
  // floored step, then v learns from the exact gradient and m moves into the units of
  // the new (floored) denominators. The reference keeps Adam's momentum M in gradient
  // units and the current v in double: every step moves p by M / d(current v).
  const size_t n = AdamW::kPreconditionBlock + 300;
  AdamWConfig c;
  c.weight_decay = 0.1f;
  AdamW opt(c, n, {{0, 1000}});
  std::vector<float> p = GaussianVector(n, 4, 0.02f);
  std::vector<double> rp(p.begin(), p.end()), rM(n, 0), rv(n, 0);
  const int64_t frozen_t = 4;
  const double lr = 1e-2;
  const size_t quiet_begin = 2000, quiet_end = 2100;  // tiny v during the warm-up
  auto grad = [&](int64_t t) {
    // After the warm-up gradients shrink by 4x: a frozen v no longer fits them.
    std::vector<float> g =
        GaussianVector(n, 500 + static_cast<uint32_t>(t), t <= frozen_t ? 1e-3f : 2.5e-4f);
    if (t <= frozen_t) {
      for (size_t i = quiet_begin; i < quiet_end; ++i) g[i] *= 1e-3f;
    }
    return g;
  };
  for (int64_t t = 1; t <= frozen_t; ++t) {
    const std::vector<float> g = grad(t);
    opt.Step(absl::MakeSpan(p), g, static_cast<float>(lr), t);
    for (size_t i = 0; i < n; ++i) {
      if (i < 1000) rp[i] -= lr * c.weight_decay * rp[i];
      rM[i] = c.beta1 * rM[i] + (1 - c.beta1) * g[i];
      rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * static_cast<double>(g[i]) * g[i];
      rp[i] -= lr * rM[i] / (1 - std::pow(c.beta1, t)) /
               (std::sqrt(rv[i] / (1 - std::pow(c.beta2, t))) + c.eps);
    }
  }
  const double bc2 = 1 - std::pow(static_cast<double>(c.beta2), frozen_t);
  const std::vector<double> v_frozen = rv;
  const std::vector<FloatRange> all = {{0, n}};
  for (int64_t t = frozen_t + 1; t <= frozen_t + 8; ++t) {
    const bool refresh = t == frozen_t + 3 || t == frozen_t + 6;
    const std::vector<float> g = grad(t);
    std::vector<float> pre = g;
    opt.Precondition(absl::MakeSpan(pre), 0, frozen_t);
    opt.StepPreconditioned(absl::MakeSpan(p), absl::MakeSpan(pre), static_cast<float>(lr), t,
                           frozen_t, {}, refresh ? all : std::vector<FloatRange>{});
    const std::vector<double> d = ReferenceDenominators(rv, c, frozen_t);  // what was sent
    const double step_size = lr / (1 - std::pow(c.beta1, t));
    for (size_t i = 0; i < n; ++i) {
      if (i < 1000) rp[i] -= lr * c.weight_decay * rp[i];
      // Top-k's step in floored units: M / d and g / d with the current v's d.
      rM[i] = c.beta1 * rM[i] + (1 - c.beta1) * g[i];
      rp[i] -= step_size * rM[i] / d[i];
      // A refresh: then v learns from the exact gradient.
      if (refresh) rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * bc2 * static_cast<double>(g[i]) * g[i];
    }
  }
  double max_diff = 0, max_quiet = 0, max_v = 0, moved = 0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(p[i] - rp[i]));
    max_v = std::max(max_v, std::fabs(opt.v()[i] - rv[i]) / rv[i]);
    moved += std::fabs(rv[i] - v_frozen[i]) / v_frozen[i];
  }
  for (size_t i = quiet_begin; i < quiet_end; ++i) {
    max_quiet = std::max(max_quiet, std::fabs(p[i] - rp[i]));
  }
  MESSAGE("top-k steps with refreshes vs the reference: max |diff| ", max_diff,
          ", floored coordinates ", max_quiet, ", v relative ", max_v);
  CHECK(moved / static_cast<double>(n) > 0.05);  // v did learn (the gradients shrank)
  CHECK(max_v < 1e-5);
  CHECK(max_diff < 1e-5);
  CHECK(max_quiet < 1e-5);
}
