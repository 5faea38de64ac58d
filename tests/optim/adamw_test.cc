// AdamW: equals a scalar double-precision reference, respects the decay mask, works on
// a shard exactly as on the whole buffer, and is independent of the thread count.
#include "optim/adamw.h"

#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "isa_paths.h"
#include "random_vector.h"

namespace {

using rt::optim::AdamW;
using rt::optim::AdamWConfig;
using rt::optim::FloatRange;
using rt::testing::GaussianVector;

bool InRanges(size_t i, const std::vector<FloatRange>& ranges) {
  for (const FloatRange& r : ranges) {
    if (i >= r.first && i < r.second) return true;
  }
  return false;
}

// The textbook algorithm, one element at a time, in double.
struct ReferenceAdamW {
  AdamWConfig c;
  std::vector<FloatRange> ranges;
  std::vector<double> m, v;
  void Step(std::vector<double>& p, const std::vector<float>& g, double lr, int64_t t,
            double scale) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double gi = g[i] * scale;
      if (InRanges(i, ranges)) p[i] -= lr * c.weight_decay * p[i];
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
      double mhat = m[i] / (1 - std::pow(c.beta1, t));
      double vhat = v[i] / (1 - std::pow(c.beta2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
    }
  }
};

}  // namespace

TEST_CASE("AdamW matches a scalar reference over several steps") {
  const size_t n = 40000;  // several pieces, with a ragged end
  AdamWConfig config;
  config.weight_decay = 0.3f;
  std::vector<FloatRange> ranges = {{100, 20000}, {25000, 39990}};
  AdamW opt(config, n, ranges);
  ReferenceAdamW ref{config, ranges, {}, {}};
  std::vector<float> p = GaussianVector(n, 1, 0.5f);
  std::vector<double> p_ref(p.begin(), p.end());
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> g = GaussianVector(n, 100 + t, 0.01f * t);
    const float lr = 1e-2f / t, scale = t == 3 ? 0.5f : 1.0f;
    opt.Step(absl::MakeSpan(p), g, lr, t, scale);
    ref.Step(p_ref, g, lr, t, scale);
  }
  double max_err = 0;
  for (size_t i = 0; i < n; ++i) max_err = std::max(max_err, std::fabs(p[i] - p_ref[i]));
  CHECK(max_err < 2e-6);
  for (size_t i = 0; i < n; i += 997) {
    CHECK(opt.m()[i] == doctest::Approx(ref.m[i]).epsilon(1e-4));
    CHECK(opt.v()[i] == doctest::Approx(ref.v[i]).epsilon(1e-4));
  }
}

TEST_CASE("AdamW decays only inside the decay ranges") {
  // With zero gradients m = v = 0, so the only change is the decay: p *= 1 - lr*wd.
  const size_t n = 1000;
  AdamWConfig config;
  config.weight_decay = 0.5f;
  std::vector<FloatRange> ranges = {{600, 800}, {10, 100}, {50, 150}};  // unsorted, overlapping
  AdamW opt(config, n, ranges);
  REQUIRE(opt.decay_ranges() == std::vector<FloatRange>{{10, 150}, {600, 800}});
  std::vector<float> p(n, 2.0f), g(n, 0.0f);
  opt.Step(absl::MakeSpan(p), g, 0.1f, 1);
  for (size_t i = 0; i < n; ++i) {
    const bool decayed = (i >= 10 && i < 150) || (i >= 600 && i < 800);
    CHECK_MESSAGE(p[i] == doctest::Approx(decayed ? 2.0f * (1 - 0.1f * 0.5f) : 2.0f), i);
  }
}

TEST_CASE("AdamW first step moves every weight by about lr against its gradient sign") {
  // At t=1, mhat/sqrt(vhat) = g/|g|: the bias correction is what makes this exact.
  AdamWConfig config;
  config.weight_decay = 0.0f;
  AdamW opt(config, 4, {});
  std::vector<float> p = {0, 0, 0, 0}, g = {3.0f, -0.001f, 1e-3f, -50.0f};
  opt.Step(absl::MakeSpan(p), g, 0.01f, 1);
  CHECK(p[0] == doctest::Approx(-0.01f).epsilon(1e-4));
  CHECK(p[1] == doctest::Approx(0.01f).epsilon(1e-3));
  CHECK(p[2] == doctest::Approx(-0.01f).epsilon(1e-3));
  CHECK(p[3] == doctest::Approx(0.01f).epsilon(1e-4));
}

TEST_CASE("AdamW on two shards equals AdamW on the whole buffer, bit for bit") {
  const size_t n = 50000, cut = 23457;
  AdamWConfig config;
  std::vector<FloatRange> ranges = {{0, 10000}, {20000, 30000}, {40000, 49000}};
  AdamW whole(config, n, ranges);
  AdamW left(config, cut, rt::optim::DecayRangesForShard(ranges, 0, cut));
  AdamW right(config, n - cut, rt::optim::DecayRangesForShard(ranges, cut, n));
  CHECK(right.decay_ranges() ==
        std::vector<FloatRange>{{0, 30000 - cut}, {40000 - cut, 49000 - cut}});
  std::vector<float> p = GaussianVector(n, 7, 1.0f), q = p;
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g = GaussianVector(n, 50 + t, 0.1f);
    whole.Step(absl::MakeSpan(p), g, 1e-3f, t);
    left.Step(absl::MakeSpan(q).subspan(0, cut), absl::MakeConstSpan(g).subspan(0, cut), 1e-3f, t);
    right.Step(absl::MakeSpan(q).subspan(cut), absl::MakeConstSpan(g).subspan(cut), 1e-3f, t);
  }
  CHECK(p == q);
}

TEST_CASE("StageParams then UpdateMoments give Step's bits -- staging changes nothing else") {
  // ZeRO-1's undoable step (train/trainer_zero.cc): the new parameters first, into
  // another buffer; the moments only once the ring has them.
  const size_t n = 40000;
  std::vector<FloatRange> ranges = {{100, 25000}, {30000, 39000}};
  AdamW whole(AdamWConfig{}, n, ranges), split(AdamWConfig{}, n, ranges);
  std::vector<float> p = GaussianVector(n, 11, 1.0f), q = p;
  for (int64_t t = 1; t <= 4; ++t) {
    const std::vector<float> g = GaussianVector(n, 70 + t, 0.1f);
    const float scale = t == 3 ? 0.37f : 1.0f;  // a clipped step among them
    whole.Step(absl::MakeSpan(p), g, 1e-3f, t, scale);
    std::vector<float> staged(n, -1.0f);
    const std::vector<float> m_before(split.m().begin(), split.m().end());
    const std::vector<float> q_before = q;
    split.StageParams(q, g, absl::MakeSpan(staged), 1e-3f, t, scale);
    CHECK(q == q_before);  // staging writes only params_out
    CHECK(std::equal(m_before.begin(), m_before.end(), split.m().begin()));
    split.UpdateMoments(g, scale);
    q.swap(staged);
    CHECK(q == p);
  }
  CHECK(std::equal(whole.m().begin(), whole.m().end(), split.m().begin()));
  CHECK(std::equal(whole.v().begin(), whole.v().end(), split.v().begin()));
}

TEST_CASE("AdamW gives the same bits with 1 and 2 threads") {
  const size_t n = 100000;
  std::vector<FloatRange> ranges = {{0, 60000}};
  std::vector<float> g = GaussianVector(n, 9, 0.1f);
  std::vector<float> results[2];
  const int saved = omp_get_max_threads();
  for (int threads = 1; threads <= 2; ++threads) {
    omp_set_num_threads(threads);
    AdamW opt(AdamWConfig{}, n, ranges);
    results[threads - 1] = GaussianVector(n, 8, 1.0f);
    opt.Step(absl::MakeSpan(results[threads - 1]), g, 1e-3f, 1);
    opt.Step(absl::MakeSpan(results[threads - 1]), g, 1e-3f, 2);
  }
  omp_set_num_threads(saved);
  CHECK(results[0] == results[1]);
}

// Peers of one ring may run different kernel paths (a Zen 2 VPS beside a Cascade Lake
// one): the parameters they update must stay bit-identical (DESIGN invariant 2).
TEST_CASE("AdamW gives the same bits on every kernel path") {
  const size_t n = 100003;  // not a multiple of any vector width
  std::vector<FloatRange> ranges = {{0, 60001}};
  std::vector<float> g = GaussianVector(n, 11, 0.1f);
  std::vector<float> baseline = GaussianVector(n, 12, 1.0f);
  {
    rt::testing::IsaScope scope(rt::Isa::kBaseline);
    AdamW opt(AdamWConfig{}, n, ranges);
    for (int64_t t = 1; t <= 3; ++t) opt.Step(absl::MakeSpan(baseline), g, 1e-3f, t, 0.5f);
  }
  RT_EVERY_KERNEL_PATH();
  std::vector<float> p = GaussianVector(n, 12, 1.0f);
  AdamW opt(AdamWConfig{}, n, ranges);
  for (int64_t t = 1; t <= 3; ++t) opt.Step(absl::MakeSpan(p), g, 1e-3f, t, 0.5f);
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += std::memcmp(&p[i], &baseline[i], 4) != 0;
  CHECK(differ == 0);
}
