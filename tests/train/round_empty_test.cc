// Round sync's outer step of a round in which no peer of the ring trained (every
// member sat it out or had no slots: on an elastic ring, the state a view change
// resumed from came from a peer --balance gave no slots, and the others received it
// mid-round). Every weight is then 0 and the exchange sums zeros; taken for the
// peers' average (codec none) it scaled the parameters down whole: an integration run
// logged a pseudo-gradient norm of 15.3 (0.3 at the outer steps around it) and its
// loss went from 3.1 to 4.5 nats, 16% above the uninterrupted run at the end. Here one
// peer alone is told (ScriptedReducer) that the round's token counts are all 0: the
// outer step must leave the round's shared parameters as they were (param_hash at the
// round's end equals the one at its start) and the momentum too, whole and sharded
// (--outer-shard on), with the same bits in both.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "collective/codec_spec.h"
#include "train/scripted_reducer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace rt::train {
namespace {

using testing::OuterHash;
using testing::Script;
using testing::ScriptedReducer;
using testing::TempDir;

constexpr int kEvery = 4;

struct Run {
  std::vector<OuterHash> outer;
  std::vector<float> momentum_before, momentum_after;  // around the empty round
};

// One peer, H = 4, 12 steps; the round ending at step count `empty_at` (-1: none) had
// no tokens on the ring.
Run RunAlone(const std::string& data, bool shard, int64_t empty_at) {
  testing::UseOneThread();
  TrainConfig c = testing::TinyConfig(data);
  c.round.every = kEvery;
  c.round.codec = *collective::ParseCodecSpec("none");
  c.round.shard = shard;
  c.steps = 12;
  Script script;
  script.zero_tokens_at = empty_at;
  Run run;
  auto t = Trainer::Create(c, std::make_unique<ScriptedReducer>(
                                  std::make_unique<LocalGradientReducer>(), script, &run.outer));
  REQUIRE_MESSAGE(t.ok(), t.status().ToString());
  while ((*t)->step() < c.steps) {
    if ((*t)->step() == empty_at - 1) {
      const absl::Span<const float> m = (*t)->round_sync()->momentum();
      run.momentum_before.assign(m.begin(), m.end());
    }
    StepMetrics m;
    REQUIRE((*t)->TrainStep(&m).ok());
    CHECK(std::isfinite(m.loss));
    if ((*t)->step() == empty_at) {
      const absl::Span<const float> mom = (*t)->round_sync()->momentum();
      run.momentum_after.assign(mom.begin(), mom.end());
    }
  }
  return run;
}

}  // namespace

TEST_CASE("round sync: a round no peer trained in leaves the shared parameters and momentum") {
  TempDir dir;
  REQUIRE(testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  std::vector<uint64_t> final_hash;
  for (bool shard : {false, true}) {
    INFO("shard ", shard);
    const Run run = RunAlone(dir.path(), shard, 2 * kEvery);
    REQUIRE(run.outer.size() == 3);  // outer steps at 4, 8 and 12
    CHECK(run.outer[0].step == kEvery);
    CHECK(run.outer[1].step == 2 * kEvery);
    CHECK(run.outer[1].hash == run.outer[0].hash);  // the round's start stays
    CHECK(run.outer[2].hash != run.outer[1].hash);  // and the next round trains on
    REQUIRE(!run.momentum_before.empty());
    CHECK(run.momentum_after == run.momentum_before);
    // The check can fail: the momentum is not zero after the first outer step.
    double norm = 0;
    for (float x : run.momentum_before) norm += static_cast<double>(x) * x;
    CHECK(norm > 0);
    final_hash.push_back(run.outer[2].hash);
  }
  CHECK(final_hash[0] == final_hash[1]);
  // Without the empty round the run differs (the test sees what it claims to).
  const Run plain = RunAlone(dir.path(), false, -1);
  CHECK(plain.outer[1].hash != plain.outer[0].hash);
}

}  // namespace rt::train
