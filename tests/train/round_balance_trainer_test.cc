// The trainer's round sync with --balance on (train/round_balancer.h,
// train/trainer_round.cc): one peer trains the bits of --balance off at every step;
// 3 in-process peers, one of which reports its compute as 100x slower (a reducer that
// scales the figures it sends: the tiny model's rounds take milliseconds, so measured
// speeds alone are at the mercy of the scheduler, a thread descheduled for 10 ms looks
// 10x slower; everything else is real), plan the same shares
// from the outer step on: that peer's share shrinks, the peers' slots make up the global batch at
// every inner step, and the replicas agree at every outer step, with and without overlap.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "collective/codec_spec.h"
#include "net/inproc_ring_transport.h"
#include "train/forwarding_reducer.h"
#include "train/ring_gradient_reducer.h"
#include "train/round_balancer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace {

using rt::train::GradientReducer;
using rt::train::RingGradientReducer;
using rt::train::RingReducerOptions;
using rt::train::RoundFigures;
using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::OnThreads;
using rt::train::testing::TempDir;

// A RingGradientReducer whose round balance figures (AllgatherInt64s of
// RoundFigures::kValues values) claim `factor` times the seconds measured; every other
// call passes through.
class SlowReportingReducer final : public rt::train::testing::ForwardingReducer {
 public:
  SlowReportingReducer(std::unique_ptr<GradientReducer> inner, double factor)
      : ForwardingReducer(std::move(inner)), factor_(factor) {}
  absl::StatusOr<std::vector<std::vector<int64_t>>> AllgatherInt64s(
      absl::Span<const int64_t> mine) override {
    std::vector<int64_t> values(mine.begin(), mine.end());
    if (values.size() == RoundFigures::kValues) {
      auto f = RoundFigures::Decode(values, 0, 1 << 30);
      REQUIRE(f.ok());
      f->compute_s *= factor_;
      if (f->seconds_per_slot > 0) f->seconds_per_slot *= factor_;
      const auto scaled = f->Encode();
      values.assign(scaled.begin(), scaled.end());
    }
    return ForwardingReducer::AllgatherInt64s(values);
  }

 private:
  double factor_;
};

TrainConfig BalancedRoundConfig(const std::string& data, bool overlap) {
  TrainConfig c = rt::train::testing::TinyConfig(data);
  c.round.every = 3;
  c.round.codec = *rt::collective::ParseCodecSpec("none");
  c.round.overlap = overlap;
  c.balance.enabled = true;
  return c;
}

std::vector<std::string> HashesAlone(const TrainConfig& c) {
  auto t = Trainer::Create(c);
  REQUIRE(t.ok());
  std::vector<std::string> hashes;
  for (int s = 0; s < c.steps; ++s) {
    StepMetrics m;
    REQUIRE((*t)->TrainStep(&m).ok());
    hashes.push_back(m.param_hash);
  }
  return hashes;
}

}  // namespace

TEST_CASE("round sync, one peer: --balance on trains the bits of --balance off at every step") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  for (const bool overlap : {false, true}) {
    INFO("overlap ", overlap);
    TrainConfig on = BalancedRoundConfig(dir.path(), overlap);
    on.steps = 10;
    on.batch = 2;  // 4 slots a step in 2 micro-steps: their order shows in the bits
    on.global_batch = 4;
    TrainConfig off = on;
    off.balance.enabled = false;
    CHECK(HashesAlone(on) == HashesAlone(off));
  }
}

TEST_CASE(
    "round sync, 3 peers, one reporting 100x slower: its share shrinks from the outer step on, "
    "every inner step's slots make up the batch, replicas agree at every outer step") {
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  for (const bool overlap : {false, true}) {
    INFO("overlap ", overlap);
    TrainConfig c = BalancedRoundConfig(dir.path(), overlap);
    c.steps = 12;  // four rounds of 3
    c.batch = 2;
    c.global_batch = 24;        // 8 slots per peer while the split is equal
    c.balance.max_skew = 1000;  // the slow peer keeps a slot
    constexpr int kPeers = 3, kSlow = 2;
    RingReducerOptions options;
    options.check_every = 1;  // the trainer compares at outer steps only
    std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(kPeers);
    std::vector<std::vector<StepMetrics>> steps(kPeers);
    std::vector<absl::Status> status(kPeers);
    // Every trainer (and its end of the ring) lives until all are done: a peer that
    // finished must not close its links while another still waits in the last step's
    // collective.
    std::vector<std::unique_ptr<Trainer>> trainers(kPeers);
    OnThreads(kPeers, [&](int r) {
      rt::train::testing::UseOneThread();
      std::unique_ptr<GradientReducer> reducer =
          std::make_unique<RingGradientReducer>(std::move(ring[r]), options);
      if (r == kSlow) reducer = std::make_unique<SlowReportingReducer>(std::move(reducer), 100.0);
      auto t = Trainer::Create(c, std::move(reducer));
      status[r] = t.status();
      if (!t.ok()) return;
      trainers[r] = std::move(*t);
      while (trainers[r]->step() < c.steps && status[r].ok()) {
        StepMetrics m;
        status[r] = trainers[r]->TrainStep(&m);
        steps[r].push_back(m);
      }
    });
    for (int r = 0; r < kPeers; ++r) {
      INFO("peer ", r, ": ", std::string(status[r].message()));
      REQUIRE(status[r].ok());
      REQUIRE(steps[r].size() == static_cast<size_t>(c.steps));
    }
    for (int s = 0; s < c.steps; ++s) {
      INFO("step ", s + 1);
      int sum = 0;
      for (int r = 0; r < kPeers; ++r) sum += steps[r][s].slots;
      CHECK(sum == c.global_batch);
      if ((s + 1) % c.round.every == 0) {
        for (int r = 1; r < kPeers; ++r) CHECK(steps[r][s].param_hash == steps[0][s].param_hash);
        // Idle time at the outer step from the agreed figures: the slowest waits for nobody.
        double least = steps[0][s].wait_ms;
        for (int r = 0; r < kPeers; ++r) {
          CHECK(steps[r][s].wait_ms >= 0);
          least = std::min(least, steps[r][s].wait_ms);
        }
        CHECK(least == 0);
      }
      // The first round is equal (nothing measured yet); from the second on the slow
      // peer's share is smaller than the others'.
      for (int r = 0; r < kPeers; ++r) {
        if (s < c.round.every) {
          CHECK(steps[r][s].slots == 8);
        } else if (r != kSlow) {
          CHECK(steps[r][s].slots > steps[kSlow][s].slots);
        }
      }
    }
    CHECK(steps[kSlow].back().slots < 8);
  }
}
