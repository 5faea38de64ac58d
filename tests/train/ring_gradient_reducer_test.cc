// RingGradientReducer over an in-process ring: 3 Trainers on 3 threads take the same
// steps as one Trainer with --accum 3 (token-weighted mean over the ring, buckets
// overlapped with backward), stay bit-identical, and the reducer's checks work:
// param-hash mismatches are named, SyncState copies rank 0's state, the broadcast
// delivers every byte.
#include "train/ring_gradient_reducer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "collective/codec_spec.h"
#include "net/inproc_ring_transport.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace {

using rt::train::RingGradientReducer;
using rt::train::RingReducerOptions;
using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::OnThreads;

std::vector<std::unique_ptr<RingGradientReducer>> MakeReducers(int n, RingReducerOptions options) {
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(n);
  std::vector<std::unique_ptr<RingGradientReducer>> out;
  for (auto& t : ring) out.push_back(std::make_unique<RingGradientReducer>(std::move(t), options));
  return out;
}

}  // namespace

TEST_CASE("3 ring peers equal one peer with accum 3 -- replicas bit-identical") {
  rt::train::testing::UseOneThread();
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  c.steps = 6;

  TrainConfig one = c;
  one.accum = 3;
  auto single = Trainer::Create(one);
  REQUIRE(single.ok());
  std::vector<double> single_loss;
  for (int s = 0; s < c.steps; ++s) {
    StepMetrics m;
    REQUIRE((*single)->TrainStep(&m).ok());
    single_loss.push_back(m.loss);
  }

  RingReducerOptions options;
  options.buckets.bucket_bytes = 4096;  // many buckets: overlap and ordering are exercised
  options.check_every = 1;
  auto reducers = MakeReducers(3, options);
  RingGradientReducer* r0 = reducers[0].get();
  std::unique_ptr<Trainer> peers[3];
  std::vector<double> loss[3];
  std::vector<uint64_t> bytes[3];
  absl::Status status[3];
  OnThreads(3, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t = Trainer::Create(c, std::move(reducers[r]));  // SyncState runs here: a collective
    status[r] = t.status();
    if (!t.ok()) return;
    peers[r] = std::move(*t);
    for (int s = 0; s < c.steps && status[r].ok(); ++s) {
      StepMetrics m;
      status[r] = peers[r]->TrainStep(&m);
      loss[r].push_back(m.loss);
      bytes[r].push_back(m.bytes_sent);
      CHECK(m.peers == 3);
      CHECK(m.rank == r);
    }
  });
  for (int r = 0; r < 3; ++r) REQUIRE_MESSAGE(status[r].ok(), status[r].message());
  CHECK(r0->last_stats().buckets.size() > 3);
  CHECK(bytes[0][1] > 0);  // per step, not cumulative: equal every step
  CHECK(bytes[0][1] == bytes[0][2]);
  for (int r = 1; r < 3; ++r) {
    CHECK(std::equal(peers[0]->params().begin(), peers[0]->params().end(),
                     peers[r]->params().begin()));
  }
  // Relative to the largest weight: float sums in another order may flip the sign of
  // a near-zero gradient, which Adam turns into a full-size update of a tiny weight.
  double max_diff = 0, max_weight = 0;
  for (size_t i = 0; i < peers[0]->params().size(); ++i) {
    const double a = peers[0]->params()[i], b = (*single)->params()[i];
    max_diff = std::max(max_diff, std::fabs(a - b));
    max_weight = std::max(max_weight, std::fabs(b));
  }
  MESSAGE("3 peers vs accum 3: max |diff| ", max_diff, ", largest weight ", max_weight);
  CHECK(max_diff / max_weight <= 1e-5);
  for (int s = 0; s < c.steps; ++s) {
    CHECK(loss[0][s] == loss[2][s]);
    CHECK(loss[0][s] == doctest::Approx(single_loss[s]).epsilon(1e-5));
  }
}

TEST_CASE("preconditioned top-k: replicas bit-identical, v frozen after the dense warm-up") {
  rt::train::testing::UseOneThread();
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  c.steps = 12;
  const int64_t warmup = 3;  // steps 0-2 dense, 3-5 falling density, then 5%
  struct Run {
    std::unique_ptr<Trainer> peers[3];
    std::vector<double> loss;  // peer 0, per step
    std::vector<float> v_frozen[3];
    std::string last_codec;
  };
  auto run = [&](const std::string& codec, int64_t precondition_from, int64_t refresh_every = 0) {
    RingReducerOptions options;
    options.buckets.bucket_bytes = 4096;
    options.buckets.codec = *rt::collective::ParseCodecSpec(codec);
    options.buckets.topk_warmup_steps = warmup;
    options.buckets.topk_refresh_every = refresh_every;
    options.buckets.precondition_from = precondition_from;
    options.check_every = 1;
    auto reducers = MakeReducers(3, options);
    RingGradientReducer* r0 = reducers[0].get();
    auto out = std::make_unique<Run>();
    absl::Status status[3];
    OnThreads(3, [&](int r) {
      rt::train::testing::UseOneThread();
      auto t = Trainer::Create(c, std::move(reducers[r]));
      status[r] = t.status();
      if (!t.ok()) return;
      out->peers[r] = std::move(*t);
      for (int s = 0; s < c.steps && status[r].ok(); ++s) {
        StepMetrics m;
        status[r] = out->peers[r]->TrainStep(&m);  // compares param hashes every step
        if (r == 0) out->loss.push_back(m.loss);
        if (out->peers[r]->step() == warmup) {
          absl::Span<const float> v = out->peers[r]->optimizer().v();
          out->v_frozen[r].assign(v.begin(), v.end());
        }
      }
    });
    for (int r = 0; r < 3; ++r) REQUIRE_MESSAGE(status[r].ok(), status[r].message());
    out->last_codec = r0->last_stats().buckets[0].codec_used;
    return out;
  };
  std::unique_ptr<Run> dense = run("none", -1);
  std::unique_ptr<Run> topk = run("topk:0.05", warmup);
  CHECK(topk->last_codec.rfind("topk:0.05", 0) == 0);  // sparse at the end
  for (int r = 0; r < 3; ++r) {
    INFO("peer ", r);
    CHECK(std::equal(topk->peers[0]->params().begin(), topk->peers[0]->params().end(),
                     topk->peers[r]->params().begin()));
    absl::Span<const float> v = topk->peers[r]->optimizer().v();
    CHECK(std::equal(v.begin(), v.end(), topk->v_frozen[r].begin()));  // untouched since step 3
    CHECK(std::any_of(v.begin(), v.end(), [](float x) { return x > 0; }));
  }
  // The dense warm-up steps are the dense run's, bit for bit; afterwards top-k at 5%
  // learns, a little behind dense.
  for (int s = 0; s < warmup; ++s) CHECK(topk->loss[s] == dense->loss[s]);
  MESSAGE("loss after 12 steps: dense ", dense->loss.back(), ", preconditioned top-k 5% ",
          topk->loss.back(), " (step 1: ", dense->loss.front(), ")");
  CHECK(topk->loss.back() < topk->loss.front() - 0.2);
  CHECK(topk->loss.back() < dense->loss.back() + 0.15);

  // --topk-refresh 3: steps 8 and 11 (0-based; the ramp ends at step 6) send the exact
  // sum: v learns there, the same on every peer; until step 8 nothing differs.
  std::unique_ptr<Run> refreshed = run("topk:0.05", warmup, 3);
  for (int s = 0; s <= 8; ++s) CHECK(refreshed->loss[s] == topk->loss[s]);
  CHECK(refreshed->loss[9] != topk->loss[9]);
  for (int r = 0; r < 3; ++r) {
    INFO("peer ", r);
    CHECK(std::equal(refreshed->peers[0]->params().begin(), refreshed->peers[0]->params().end(),
                     refreshed->peers[r]->params().begin()));
    absl::Span<const float> v = refreshed->peers[r]->optimizer().v();
    absl::Span<const float> v0 = refreshed->peers[0]->optimizer().v();
    CHECK(std::equal(v.begin(), v.end(), v0.begin()));
    CHECK_FALSE(std::equal(v.begin(), v.end(), refreshed->v_frozen[r].begin()));  // it learned
  }
  CHECK(refreshed->last_codec == "refresh");  // step 11 was one
}

TEST_CASE("a param_hash mismatch names the step and the peers on each side") {
  RingReducerOptions options;
  options.check_every = 2;
  auto reducers = MakeReducers(3, options);
  absl::Status status[3];
  OnThreads(3, [&](int r) {
    CHECK(reducers[r]->CheckParamHash(1, 5).ok());  // not a checked step: no collective
    status[r] = reducers[r]->CheckParamHash(4, r == 1 ? 0xbad : 0x600d);
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(!status[r].ok());
    const std::string msg(status[r].message());
    CHECK(msg.find("step 4") != std::string::npos);
    CHECK(msg.find("peers 0,2 have 000000000000600d") != std::string::npos);
    CHECK(msg.find("peer 1 has 0000000000000bad") != std::string::npos);
  }
  auto same = MakeReducers(2, options);
  OnThreads(2, [&](int r) { CHECK(same[r]->CheckParamHash(2, 77).ok()); });
}

TEST_CASE("SyncState gives every peer rank 0's step and state -- broadcast is exact") {
  auto reducers = MakeReducers(3, RingReducerOptions());
  std::vector<std::vector<float>> a(3), b(3);
  int64_t steps[3] = {40, 0, 40};
  for (int r = 0; r < 3; ++r) {
    a[r].assign(1000003, 0.0f);
    b[r].assign(17, static_cast<float>(r));
    for (size_t i = 0; i < a[r].size(); ++i) a[r][i] = r == 1 ? 0.0f : static_cast<float>(i) * 0.5f;
  }
  absl::Status status[3];
  OnThreads(3, [&](int r) {
    status[r] = reducers[r]->SyncState(&steps[r], {absl::MakeSpan(a[r]), absl::MakeSpan(b[r])});
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE_MESSAGE(status[r].ok(), status[r].message());
    CHECK(steps[r] == 40);
    CHECK(a[r] == a[0]);
    CHECK(b[r] == b[0]);
  }
  CHECK(a[1][999999] == 999999 * 0.5f);

  // The broadcast alone, with a chunk size that does not divide the length.
  auto ring = rt::net::MakeInProcessRing(4);
  std::vector<std::vector<uint8_t>> data(4, std::vector<uint8_t>(10007, 0));
  for (size_t i = 0; i < data[0].size(); ++i) data[0][i] = static_cast<uint8_t>(i * 31);
  OnThreads(4, [&](int r) {
    const absl::Status s = rt::train::RingBroadcastFromRank0(ring[r].get(), absl::MakeSpan(data[r]),
                                                             absl::Seconds(30), 1000);
    CHECK(s.ok());
  });
  for (int r = 1; r < 4; ++r) CHECK(data[r] == data[0]);
}
