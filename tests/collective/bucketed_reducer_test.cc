// Bucketed reducer: deterministic buckets, equals one big allreduce while compute
// reports gradients in reverse, codecs per bucket, failures end the step cleanly.
#include "collective/bucketed_reducer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/ring_test_util.h"

namespace rt::collective {
namespace {

using testing::RunOnRing;

TEST_CASE("buckets are cut from the end, deterministically") {
  auto ring = net::MakeInProcessRing(1);
  BucketedReducerOptions options;
  options.bucket_bytes = 16;  // 4 floats
  BucketedReducer r(ring[0].get(), 10, options);
  REQUIRE(r.buckets().size() == 3);
  CHECK(r.buckets()[0].begin == 6);
  CHECK(r.buckets()[0].end == 10);
  CHECK(r.buckets()[1].begin == 2);
  CHECK(r.buckets()[2].begin == 0);
  CHECK(r.buckets()[2].end == 2);
  BucketedReducer empty(ring[0].get(), 0, options);
  CHECK(empty.buckets().empty());
  REQUIRE(empty.Start({}, 0).ok());
  ReduceStepStats stats;
  CHECK(empty.Finish(&stats).ok());
}

TEST_CASE("bucketed reducer equals one big allreduce, with gradients arriving in reverse") {
  const size_t len = 100003;
  for (int n : {1, 2, 3}) {
    std::vector<std::vector<float>> g(n, std::vector<float>(len)), want(n);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < len; ++i)
        g[p][i] = static_cast<float>(static_cast<int>((i * 31 + p * 7) % 1000) - 500);
    for (int p = 0; p < n; ++p) want[p] = g[p];
    REQUIRE(RunOnRing(n,
                      [&](net::RingTransport* t) {
                        return AllreduceSum(t, absl::MakeSpan(want[t->rank()]));
                      })[0]
                .ok());
    std::vector<ReduceStepStats> stats(n);
    auto status = RunOnRing(
        n,
        [&](net::RingTransport* t) -> absl::Status {
          BucketedReducerOptions options;
          options.bucket_bytes = 40000;  // 10000 floats: 11 buckets
          options.allreduce.chunk_bytes = 8192;
          BucketedReducer reducer(t, len, options);
          // Two steps over the same reducer: the thread and state are reused.
          for (int step = 0; step < 2; ++step) {
            std::vector<float> grads = g[t->rank()];
            absl::Status s = reducer.Start(absl::MakeSpan(grads), step);
            if (!s.ok()) return s;
            for (size_t o = len; o > 0;) {  // "backward": layers finish from the end
              o = o > 7777 ? o - 7777 : 0;
              reducer.GradReady(o);
              std::this_thread::yield();
            }
            s = reducer.Finish(&stats[t->rank()]);
            if (!s.ok()) return s;
            if (std::memcmp(grads.data(), want[t->rank()].data(), len * 4) != 0) {
              return absl::InternalError("bucketed result differs from one big allreduce");
            }
          }
          return absl::OkStatus();
        },
        /*zero_copy=*/true);
    for (int p = 0; p < n; ++p) {
      INFO("N=" << n << " peer " << p << ": " << status[p].ToString());
      CHECK(status[p].ok());
      CHECK(stats[p].buckets.size() == 11);
      CHECK(stats[p].comm_wait_ms >= 0);
      // 2(N-1)/N of the buffer, up to uneven segment splits.
      const double ideal = 2.0 * (n - 1) * len * 4 / n;
      if (n > 1) CHECK(std::fabs(stats[p].bytes_sent - ideal) < 1e-3 * ideal);
    }
  }
}

TEST_CASE("bucketed reducer runs per-bucket codecs and stays identical across peers") {
  const int n = 3;
  const size_t len = 50000;
  std::vector<std::vector<float>> results(n);
  auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
    BucketedReducerOptions options;
    options.bucket_bytes = 80000;  // 20000 floats: buckets of 20000, 20000, 10000
    options.dense_ranges = {{0, 100}, {29990, 30010}};
    BucketedReducer reducer(t, len, options);
    reducer.SetCodec(0, *ParseCodecSpec("topk:0.01", 1));
    reducer.SetCodec(1, *ParseCodecSpec("bf16"));
    std::mt19937 rng(t->rank());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> grads(len);
    for (int step = 0; step < 3; ++step) {
      for (float& x : grads) x = normal(rng);
      absl::Status s = reducer.Start(absl::MakeSpan(grads), step);
      if (!s.ok()) return s;
      ReduceStepStats stats;
      s = reducer.Finish(&stats);
      if (!s.ok()) return s;
      if (stats.buckets[0].codec_used != "topk:0.01+zstd1" ||
          stats.buckets[1].codec_used != "bf16" || stats.buckets[2].codec_used != "none") {
        return absl::InternalError("unexpected codecs: " + stats.buckets[0].codec_used);
      }
    }
    results[t->rank()] = grads;
    return absl::OkStatus();
  });
  for (int p = 0; p < n; ++p) {
    REQUIRE(status[p].ok());
    CHECK(std::memcmp(results[p].data(), results[0].data(), len * 4) == 0);
  }
}

TEST_CASE(
    "codec changes between steps (a re-plan) and a new ring lose nothing: results plus "
    "residuals equal the inputs exactly") {
  // Integer-valued gradients (|x| <= 64, sums of 3 peers over 6 steps < 2^8 * 6):
  // top-k, bf16 and fp32 sums are all exact, so conservation is checked bit for bit.
  // The codec of each bucket changes every step (as auto re-plans do), and from step
  // 3 on the reducer runs on a second ring (as after a re-form): residuals carry over.
  const int n = 3;
  const size_t len = 30000;
  const char* plans[6][3] = {{"topk:0.01", "topk:0.05", "bf16"}, {"bf16", "topk:0.01", "none"},
                             {"topk:0.05", "none", "topk:0.01"}, {"none", "bf16", "topk:0.05"},
                             {"topk:0.01", "topk:0.01", "bf16"}, {"none", "none", "none"}};
  auto second = net::MakeInProcessRing(n);
  std::vector<double> total_in(n, 0), total_out(n, 0);
  std::vector<std::vector<float>> last(n);
  auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
    const int rank = t->rank();
    BucketedReducerOptions options;
    options.bucket_bytes = 40000;  // 10000 floats: 3 buckets
    BucketedReducer reducer(t, len, options);
    std::mt19937 rng(100 + rank);
    std::vector<float> grads(len);
    for (int step = 0; step < 6; ++step) {
      if (step == 3) {
        absl::Status s = reducer.SetRing(second[rank].get());
        if (!s.ok()) return s;
      }
      for (size_t b = 0; b < 3; ++b) reducer.SetCodec(b, *ParseCodecSpec(plans[step][b]));
      for (float& x : grads) x = static_cast<float>(static_cast<int>(rng() % 129) - 64);
      for (float x : grads) total_in[rank] += x;
      absl::Status s = reducer.Start(absl::MakeSpan(grads), step);
      if (s.ok()) s = reducer.Finish(nullptr);
      if (!s.ok()) return s;
      for (float x : grads) total_out[rank] += x;
    }
    // Step 5 runs "none" everywhere: every residual was folded in and sent (and
    // reads zero once the step is committed).
    if (absl::Status c = reducer.CommitStep(); !c.ok()) return c;
    for (size_t b = 0; b < 3; ++b) {
      for (float r : reducer.residual(b)) {
        if (r != 0) return absl::InternalError("a residual survived the dense step");
      }
    }
    last[rank] = grads;
    return absl::OkStatus();
  });
  double all_in = 0;
  for (int p = 0; p < n; ++p) {
    REQUIRE_MESSAGE(status[p].ok(), status[p].message());
    all_in += total_in[p];
    CHECK(std::memcmp(last[p].data(), last[0].data(), len * 4) == 0);
  }
  // Every peer's outputs are the sums over peers, so each peer's output total is
  // the total of every peer's input.
  for (int p = 0; p < n; ++p) CHECK(total_out[p] == all_in);
}

TEST_CASE("the precondition hook sees each bucket at its offset, from its first step on") {
  const int n = 2;
  const size_t len = 1000;
  std::mutex mu;
  std::vector<std::pair<int, size_t>> seen;  // (peer, offset) of every hook call
  std::vector<std::vector<float>> results(n);
  auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
    BucketedReducerOptions options;
    options.bucket_bytes = 1600;  // 400 floats: buckets at 600, 200, 0
    options.precondition_from = 1;
    BucketedReducer reducer(t, len, options);
    const int rank = t->rank();
    reducer.SetPreconditioner([&mu, &seen, rank](absl::Span<float> bucket, size_t offset) {
      for (float& x : bucket) x *= 2;  // runs before the exchange: the sum doubles
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(rank, offset);
    });
    std::vector<float> grads(len);
    for (int step = 0; step < 2; ++step) {
      for (size_t i = 0; i < len; ++i) grads[i] = static_cast<float>(i % 7 + rank);
      absl::Status s = reducer.Start(absl::MakeSpan(grads), step);
      if (!s.ok()) return s;
      ReduceStepStats stats;
      s = reducer.Finish(&stats);
      if (!s.ok()) return s;
      const float want = static_cast<float>((step == 0 ? 1 : 2) * (2 * (5 % 7) + 1));
      if (grads[5] != want) return absl::InternalError(absl::StrCat("step ", step, ": ", grads[5]));
    }
    results[rank] = grads;
    return absl::OkStatus();
  });
  for (int p = 0; p < n; ++p) REQUIRE_MESSAGE(status[p].ok(), status[p].message());
  std::sort(seen.begin(), seen.end());
  const std::vector<std::pair<int, size_t>> want = {{0, 0}, {0, 200}, {0, 600},
                                                    {1, 0}, {1, 200}, {1, 600}};
  CHECK(seen == want);  // step 0 is before precondition_from: no calls
  CHECK(results[0] == results[1]);
}

TEST_CASE("SetRing is refused during a step") {
  auto ring = net::MakeInProcessRing(1);
  auto other = net::MakeInProcessRing(1);
  BucketedReducer reducer(ring[0].get(), 100, BucketedReducerOptions());
  std::vector<float> g(100, 1.0f);
  REQUIRE(reducer.Start(absl::MakeSpan(g), 0).ok());
  CHECK_FALSE(reducer.SetRing(other[0].get()).ok());
  REQUIRE(reducer.Finish(nullptr).ok());
  CHECK(reducer.SetRing(other[0].get()).ok());
}

TEST_CASE("a failed bucket ends the step with an error and the reducer refuses more") {
  std::vector<absl::Status> second(2);
  auto status = RunOnRing(2, [&](net::RingTransport* t) -> absl::Status {
    BucketedReducerOptions options;
    options.bucket_bytes = t->rank() == 0 ? 4000 : 4400;  // peers disagree on the buckets
    options.allreduce.timeout = absl::Milliseconds(300);
    const size_t len = 5000;
    BucketedReducer reducer(t, len, options);
    std::vector<float> grads(len, 1.0f);
    absl::Status s = reducer.Start(absl::MakeSpan(grads), 0);
    if (!s.ok()) return s;
    ReduceStepStats stats;
    s = reducer.Finish(&stats);
    second[t->rank()] = reducer.Start(absl::MakeSpan(grads), 1);
    return s;
  });
  CHECK(!status[0].ok());
  CHECK(!status[1].ok());
  CHECK(second[0].code() == absl::StatusCode::kFailedPrecondition);
  CHECK(second[1].code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE(
    "RollbackStep undoes a step that was not applied: top-k adds back what it selected, a "
    "dense bucket keeps the residual it folded in") {
  // Two buckets: bucket 0 (the upper half) under top-k, bucket 1 first top-k (to build
  // a residual), then dense. Integer values: every sum below is exact.
  const int n = 2;
  const size_t len = 2000;
  auto status = RunOnRing(n, [&](net::RingTransport* t) -> absl::Status {
    BucketedReducerOptions options;
    options.bucket_bytes = 4000;  // 1000 floats per bucket
    BucketedReducer reducer(t, len, options);
    reducer.SetCodecAll(*ParseCodecSpec("topk:0.1"));
    std::mt19937 rng(7 + t->rank());
    std::vector<float> grads(len), step1(len);
    auto fill = [&](std::vector<float>* g) {
      for (float& x : *g) x = static_cast<float>(static_cast<int>(rng() % 17) - 8);
    };
    fill(&grads);
    if (absl::Status s = reducer.Start(absl::MakeSpan(grads), 0); !s.ok()) return s;
    if (absl::Status s = reducer.Finish(nullptr); !s.ok()) return s;
    if (absl::Status s = reducer.CommitStep(); !s.ok()) return s;
    if (reducer.step_pending()) return absl::InternalError("committed, still pending");
    std::vector<std::vector<float>> before(2);
    for (size_t b = 0; b < 2; ++b) {
      before[b].assign(reducer.residual(b).begin(), reducer.residual(b).end());
    }
    // Step 1 runs, then is discarded (as when a view change interrupts the step).
    reducer.SetCodec(1, *ParseCodecSpec("none"));
    fill(&step1);
    grads = step1;
    if (absl::Status s = reducer.Start(absl::MakeSpan(grads), 1); !s.ok()) return s;
    if (absl::Status s = reducer.Finish(nullptr); !s.ok()) return s;
    if (!reducer.step_pending()) return absl::InternalError("a finished step is not pending");
    if (absl::Status s = reducer.RollbackStep(); !s.ok()) return s;
    const auto& buckets = reducer.buckets();
    for (size_t i = 0; i < 1000; ++i) {
      // Top-k: as if nothing had been selected, the step's gradient joins the residual.
      const float topk_want = before[0][i] + step1[buckets[0].begin + i];
      if (reducer.residual(0)[i] != topk_want) {
        return absl::InternalError(
            absl::StrCat("top-k bucket at ", i, ": ", reducer.residual(0)[i], " != ", topk_want));
      }
      // Dense: what was folded into the discarded sum is still held.
      if (reducer.residual(1)[i] != before[1][i]) {
        return absl::InternalError(absl::StrCat("dense bucket at ", i, ": ", reducer.residual(1)[i],
                                                " != ", before[1][i]));
      }
    }
    if (absl::Status s = reducer.RollbackStep(); !s.ok()) return s;  // idempotent
    if (reducer.residual(1)[3] != before[1][3]) return absl::InternalError("second rollback");
    // Committed instead, the dense bucket's residual went out with the sum.
    grads = step1;
    if (absl::Status s = reducer.Start(absl::MakeSpan(grads), 1); !s.ok()) return s;
    if (absl::Status s = reducer.Finish(nullptr); !s.ok()) return s;
    if (absl::Status s = reducer.CommitStep(); !s.ok()) return s;
    for (float r : reducer.residual(1)) {
      if (r != 0) return absl::InternalError("a committed dense step left a residual");
    }
    return absl::OkStatus();
  });
  for (int p = 0; p < n; ++p) CHECK_MESSAGE(status[p].ok(), status[p].message());
}

}  // namespace
}  // namespace rt::collective
