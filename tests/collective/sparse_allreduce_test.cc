// Sparse exchange and per-bucket codecs across peers: equals a dense sum,
// bit-identical on every peer, error feedback keeps what was not sent.
#include "collective/sparse_allreduce.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "collective/bucket_exchange.h"
#include "collective/ring_allreduce.h"
#include "collective/ring_test_util.h"
#include "collective/sparse_codec.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

SparseVector RandomSparse(size_t n, size_t k, uint32_t seed, bool integers) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = static_cast<uint32_t>(i);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(k);
  std::sort(all.begin(), all.end());
  SparseVector v;
  v.indices = all;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t j = 0; j < k; ++j) {
    float x = integers ? static_cast<float>(static_cast<int>(rng() % 64) - 32) : normal(rng);
    v.values.push_back(FloatToBf16(x));
  }
  return v;
}

TEST_CASE("sparse exchange equals the dense sum of the same sparse vectors") {
  for (int n = 1; n <= 4; ++n) {
    for (bool integers : {true, false}) {
      const size_t len = 30011;
      std::vector<SparseVector> sparse;
      std::vector<std::vector<float>> dense(n, std::vector<float>(len, 0.0f));
      for (int p = 0; p < n; ++p) {
        sparse.push_back(RandomSparse(len, 400 + 100 * p, 17 * p + integers, integers));
        for (size_t j = 0; j < sparse[p].indices.size(); ++j)
          dense[p][sparse[p].indices[j]] = Bf16ToFloat(sparse[p].values[j]);
      }
      std::vector<std::vector<float>> out(n, std::vector<float>(len, 99.0f));
      std::vector<uint64_t> sent(n, 0);
      auto status = RunOnRing(
          n,
          [&](net::RingTransport* t) -> absl::Status {
            std::vector<uint8_t> bytes;
            EncodeSparse(sparse[t->rank()], len, t->rank() % 2 ? 3 : 0, &bytes);
            absl::Status s = SparseAllgatherSum(t, bytes, absl::MakeSpan(out[t->rank()]),
                                                absl::Seconds(20), &sent[t->rank()]);
            if (!s.ok()) return s;
            return AllreduceSum(t, absl::MakeSpan(dense[t->rank()]));
          },
          /*zero_copy=*/integers);
      for (int p = 0; p < n; ++p) REQUIRE(status[p].ok());
      INFO("N=" << n << " integers=" << integers);
      for (int p = 0; p < n; ++p) {
        // Bit-identical on all peers.
        CHECK(std::memcmp(out[p].data(), out[0].data(), len * 4) == 0);
        if (n > 1) CHECK(sent[p] > 0);
      }
      // Rank-order reference, and (integers: exact) the dense ring sum.
      bool same_as_reference = true, same_as_dense = true;
      for (size_t i = 0; i < len; ++i) {
        float want = 0.0f;
        for (int p = 0; p < n; ++p) {
          auto it = std::lower_bound(sparse[p].indices.begin(), sparse[p].indices.end(), i);
          if (it != sparse[p].indices.end() && *it == i)
            want += Bf16ToFloat(sparse[p].values[it - sparse[p].indices.begin()]);
        }
        same_as_reference = same_as_reference && out[0][i] == want;
        same_as_dense = same_as_dense && (std::fabs(out[0][i] - dense[0][i]) <=
                                          (integers ? 0.0f : 1e-6f * (1 + std::fabs(want))));
      }
      CHECK(same_as_reference);
      CHECK(same_as_dense);
    }
  }
}

TEST_CASE("sparse pays only while N * density < 2") {
  CHECK(SparsePays(4, 0.01));
  CHECK(SparsePays(100, 0.01));
  CHECK(!SparsePays(4, 0.5));
  CHECK(!SparsePays(2, 1.0));
}

TEST_CASE("bucket exchange: every codec gives identical bytes and keeps what it did not send") {
  const int n = 3;
  const size_t len = 20000;
  for (const char* codec : {"none", "bf16", "topk:0.05", "topk:0.9"}) {
    auto spec = ParseCodecSpec(codec, 1);
    REQUIRE(spec.ok());
    std::vector<std::unique_ptr<BucketExchange>> ex;
    for (int p = 0; p < n; ++p)
      ex.push_back(std::make_unique<BucketExchange>(len, std::vector<IndexRange>{{0, 16}}));
    // Over several steps: sum of results + sum of final residuals == sum of inputs.
    std::vector<double> total_in(len, 0.0), total_out(len, 0.0);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int step = 0; step < 4; ++step) {
      std::vector<std::vector<float>> g(n, std::vector<float>(len));
      for (auto& v : g)
        for (float& x : v) x = normal(rng);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < len; ++i) total_in[i] += g[p][i];
      std::vector<ExchangeStats> stats(n);
      auto status = RunOnRing(n, [&](net::RingTransport* t) {
        // Warm-up of 1 step: step 0 dense, step 1 at density 0.05^(1/2), then 0.05.
        return ex[t->rank()]->Run(t, absl::MakeSpan(g[t->rank()]), *spec, step, 1, 0, {},
                                  &stats[t->rank()]);
      });
      INFO("codec " << codec << " step " << step);
      for (int p = 0; p < n; ++p) {
        REQUIRE(status[p].ok());
        CHECK(std::memcmp(g[p].data(), g[0].data(), len * 4) == 0);
        CHECK(stats[p].bytes_sent > 0);
      }
      for (size_t i = 0; i < len; ++i) total_out[i] += g[0][i];
      if (std::string(codec) == "topk:0.05" && step >= 2) {
        CHECK(stats[0].codec_used == "topk:0.05+zstd1");
        CHECK(stats[0].entries_sent == 16 + TopKCount(len - 16, 0.05));
      }
      if (std::string(codec) == "topk:0.9") CHECK(stats[0].codec_used == "none");  // 3*0.9 >= 2
    }
    double worst = 0;
    for (size_t i = 0; i < len; ++i) {
      double kept = 0;
      for (int p = 0; p < n; ++p)
        if (!ex[p]->residual().empty()) kept += ex[p]->residual()[i];
      worst = std::max(worst, std::fabs(total_out[i] + kept - total_in[i]));
    }
    INFO("codec " << codec);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("a top-k refresh step sums the exact gradient and leaves the residual for later") {
  // Warm-up 1, refresh every 2: steps 0 dense, 1 ramp, 2 top-k, 3 refresh, 4 top-k, 5 refresh.
  CHECK(!IsTopKRefreshStep(2, 1, 2));
  CHECK(IsTopKRefreshStep(3, 1, 2));
  CHECK(IsTopKRefreshStep(5, 1, 2));
  CHECK(!IsTopKRefreshStep(1, 1, 1));  // inside the ramp
  CHECK(IsTopKRefreshStep(2, 1, 1));
  CHECK(!IsTopKRefreshStep(3, 0, 2));  // no warm-up: no preconditioning, no refresh
  CHECK(!IsTopKRefreshStep(3, 1, 0));
  const int n = 3;
  const size_t len = 5000;
  auto spec = ParseCodecSpec("topk:0.05", 0);
  REQUIRE(spec.ok());
  std::vector<std::unique_ptr<BucketExchange>> ex;
  for (int p = 0; p < n; ++p)
    ex.push_back(std::make_unique<BucketExchange>(len, std::vector<IndexRange>{}));
  std::vector<double> total_in(len, 0.0), total_out(len, 0.0);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 6; ++step) {
    std::vector<std::vector<float>> g(n, std::vector<float>(len));
    for (auto& v : g)
      for (float& x : v) x = normal(rng);
    std::vector<double> exact(len, 0.0);  // this step's gradients summed
    std::vector<std::vector<float>> residual_before(n);
    for (int p = 0; p < n; ++p) {
      for (size_t i = 0; i < len; ++i) total_in[i] += g[p][i], exact[i] += g[p][i];
      residual_before[p].assign(ex[p]->residual().begin(), ex[p]->residual().end());
    }
    std::vector<ExchangeStats> stats(n);
    auto status = RunOnRing(n, [&](net::RingTransport* t) {
      return ex[t->rank()]->Run(t, absl::MakeSpan(g[t->rank()]), *spec, step, 1, 2, {},
                                &stats[t->rank()]);
    });
    INFO("step " << step);
    for (int p = 0; p < n; ++p) REQUIRE(status[p].ok());
    for (int p = 0; p < n; ++p) CHECK(std::memcmp(g[p].data(), g[0].data(), len * 4) == 0);
    for (size_t i = 0; i < len; ++i) total_out[i] += g[0][i];
    if (step == 3 || step == 5) {
      CHECK(stats[0].codec_used == "refresh");
      double off = 0;
      for (size_t i = 0; i < len; ++i) off = std::max(off, std::fabs(g[0][i] - exact[i]));
      CHECK(off < 1e-5);
      for (int p = 0; p < n; ++p) {
        REQUIRE(ex[p]->residual().size() == len);
        CHECK(std::memcmp(ex[p]->residual().data(), residual_before[p].data(), len * 4) == 0);
        // Committed or rolled back, a refresh leaves the residual as it was.
        ex[p]->Rollback();
        CHECK(std::memcmp(ex[p]->residual().data(), residual_before[p].data(), len * 4) == 0);
      }
    } else if (step >= 2) {
      CHECK(stats[0].codec_used == "topk:0.05");
    }
  }
  // What went out plus what is held is everything, as for the other codecs.
  double worst = 0, held = 0;
  for (size_t i = 0; i < len; ++i) {
    double kept = 0;
    for (int p = 0; p < n; ++p) kept += ex[p]->residual()[i];
    held += std::fabs(kept);
    worst = std::max(worst, std::fabs(total_out[i] + kept - total_in[i]));
  }
  CHECK(worst < 1e-4);
  CHECK(held > 1.0);  // the residual was really carried through the refresh steps
}

}  // namespace
}  // namespace rt::collective
