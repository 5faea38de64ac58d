// The trainer's switch into round sync (--outer-after N; Trainer::SettleSyncMode): 2
// in-process peers with per-step bf16 (error feedback) switching to int8 outer
// exchanges with overlap give, at every step after N, the bits of the recipe the switch
// replaces (per-step steps to N, a checkpoint, new trainers resumed from it with round
// sync), and the per-step run's bits before N; a run that never switches ends
// elsewhere.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collective/codec_spec.h"
#include "net/inproc_ring_transport.h"
#include "train/ring_gradient_reducer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace {

using rt::train::RingGradientReducer;
using rt::train::RingReducerOptions;
using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::OnThreads;
using rt::train::testing::TempDir;

constexpr int kPeers = 2;

// [peer][step] param_hash of `peers` in-process trainers of `c` trained up to step
// count `until`, then (with c.ckpt_dir) a checkpoint by ring position 0. The ring's
// per-step codec is bf16 (its residuals are what the switch must drop). With `lrs`,
// also each step's learning rate ([peer][step]).
std::vector<std::vector<std::string>> TrainRing(const TrainConfig& c, int until,
                                                std::vector<std::vector<float>>* lrs = nullptr) {
  RingReducerOptions options;
  options.buckets.bucket_bytes = 6000;  // several buckets
  options.buckets.codec = *rt::collective::ParseCodecSpec("bf16");
  options.check_every = 1;
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(kPeers);
  std::vector<std::vector<std::string>> hashes(kPeers);
  std::vector<std::vector<float>> lr(kPeers);
  std::vector<absl::Status> status(kPeers);
  // Alive until every peer is done: a trainer destroyed early closes its side of the
  // ring while the other still compares its last param_hash.
  std::vector<std::unique_ptr<Trainer>> trainers(kPeers);
  OnThreads(kPeers, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t = Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), options));
    status[r] = t.status();
    if (!t.ok()) return;
    trainers[r] = *std::move(t);
    while (status[r].ok() && trainers[r]->step() < until) {
      StepMetrics m;
      status[r] = trainers[r]->TrainStep(&m);
      hashes[r].push_back(m.param_hash);
      lr[r].push_back(m.lr);
    }
    if (status[r].ok() && !c.ckpt_dir.empty()) status[r] = trainers[r]->SaveCheckpoint();
  });
  for (int r = 0; r < kPeers; ++r) {
    INFO("peer ", r, ": ", status[r].message());
    REQUIRE(status[r].ok());
  }
  if (lrs != nullptr) *lrs = lr;
  return hashes;
}

// The tiny ring's per-step configuration (14 steps, global batch 4) and its round-sync
// twin (H = 4, int8 with overlap) with the given outer optimizer.
std::pair<TrainConfig, TrainConfig> SwitchConfigs(const std::string& data, float outer_lr,
                                                  float outer_momentum) {
  TrainConfig per_step = rt::train::testing::TinyConfig(data);
  per_step.steps = 14;
  per_step.batch = 2;
  per_step.global_batch = 4;
  TrainConfig round = per_step;
  round.round.every = 4;
  round.round.outer_lr = outer_lr;
  round.round.outer_momentum = outer_momentum;
  round.round.codec = *rt::collective::ParseCodecSpec("int8");
  round.round.overlap = true;
  return {per_step, round};
}

// The route --outer-after replaces, by hand: `per_step` trained to step `n` with a
// checkpoint in `ckpt_dir`, then `round` resumed from it to its last step. Returns the
// resumed run's hashes ([peer][step - n]).
std::vector<std::vector<std::string>> PerStepThenResumed(const TrainConfig& per_step,
                                                         const TrainConfig& round, int n,
                                                         const std::string& ckpt_dir) {
  TrainConfig first = per_step;
  first.ckpt_dir = ckpt_dir;
  (void)TrainRing(first, n);
  TrainConfig resumed = round;
  resumed.ckpt_dir = ckpt_dir;
  resumed.resume = true;
  return TrainRing(resumed, resumed.steps);
}

}  // namespace

TEST_CASE(
    "--outer-after N: the bits of per-step steps to N, a checkpoint, and a resume in rounds") {
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir / "data", 64, 6000, 500).empty());
  const auto [per_step, round] = SwitchConfigs(dir / "data", 0.7f, 0.9f);
  const int n = 6;  // the first round (steps 7-8) is short; 12 launches beside 13-14

  TrainConfig switched = round;
  switched.round.after = n;
  const auto a = TrainRing(switched, switched.steps);
  const auto plain = TrainRing(per_step, per_step.steps);

  const auto b = PerStepThenResumed(per_step, round, n, dir / "ckpt");  // --outer-every from n

  for (int r = 0; r < kPeers; ++r) {
    REQUIRE(a[r].size() == 14);
    REQUIRE(b[r].size() == 14 - n);
    for (int s = 0; s < 14; ++s) {
      INFO("peer ", r, " step ", s + 1);
      CHECK(a[r][s] == (s < n ? plain[r][s] : b[r][s - n]));
    }
  }
  CHECK(a[0][13] == a[1][13]);
  CHECK(a[0][13] != plain[0][13]);  // never switching ends elsewhere
}

TEST_CASE(
    "--inner-lr-scale with --outer-after: the per-step steps keep the schedule, the inner "
    "steps take the scaled one") {
  // The recipe the flag replaces: per-step steps to N, a checkpoint, and a resume in
  // rounds with --lr and --min-lr doubled (the cosine schedule is linear in both, and a
  // factor of 2 is exact in floating point, so F = 2 must give those bits).
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir / "data", 64, 6000, 500).empty());
  const auto [per_step, round] = SwitchConfigs(dir / "data", 1.0f, 0.5f);
  const int n = 6;

  TrainConfig scaled = round;
  scaled.round.after = n;
  scaled.round.inner_lr_scale = 2.0f;
  REQUIRE(scaled.round.Validate().ok());
  std::vector<std::vector<float>> lr_scaled, lr_plain;
  const auto a = TrainRing(scaled, scaled.steps, &lr_scaled);
  const auto plain = TrainRing(per_step, per_step.steps, &lr_plain);

  TrainConfig doubled = round;  // the hand-made recipe: --lr 2x from the switch on
  doubled.lr *= 2;
  doubled.min_lr *= 2;
  const auto b = PerStepThenResumed(per_step, doubled, n, dir / "ckpt");

  for (int r = 0; r < kPeers; ++r) {
    REQUIRE(a[r].size() == 14);
    REQUIRE(b[r].size() == 14 - n);
    for (int s = 0; s < 14; ++s) {
      INFO("peer ", r, " step ", s + 1);
      CHECK(a[r][s] == (s < n ? plain[r][s] : b[r][s - n]));
      CHECK(lr_scaled[r][s] == (s < n ? lr_plain[r][s] : 2 * lr_plain[r][s]));
    }
  }
  CHECK(a[0][13] == a[1][13]);
}
