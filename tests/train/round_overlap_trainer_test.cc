// The trainer under round sync with overlap (--outer-overlap on; sync/round_sync.h
// "Overlap", train/trainer_round.cc): one peer with outer lr 1 and no momentum trains
// the bits of plain training, its shared parameters one round behind (a reference
// computed by plain training); 3 in-process peers agree on the shared parameters at
// every round's end for every codec, their replicas differ in between, and the run's
// last round drains so that every peer ends on the same bits.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "collective/codec_spec.h"
#include "net/inproc_ring_transport.h"
#include "train/param_hash.h"
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

TrainConfig OverlapConfig(const std::string& data, int every, float lr, float mu,
                          const std::string& codec, bool overlap = true) {
  TrainConfig c = rt::train::testing::TinyConfig(data);
  c.round.every = every;
  c.round.outer_lr = lr;
  c.round.outer_momentum = mu;
  c.round.codec = *rt::collective::ParseCodecSpec(codec);
  c.round.overlap = overlap;
  return c;
}

struct Alone {
  std::string initial;              // hash of the initial parameters
  std::vector<std::string> hashes;  // metrics param_hash per step
  std::vector<float> params;        // at the end
};

Alone TrainAlone(const TrainConfig& c) {
  auto t = Trainer::Create(c);
  REQUIRE(t.ok());
  Alone out;
  out.initial = rt::train::ParamHashHex(rt::train::ParamHash((*t)->params()));
  for (int s = 0; s < c.steps; ++s) {
    StepMetrics m;
    REQUIRE((*t)->TrainStep(&m).ok());
    out.hashes.push_back(m.param_hash);
  }
  out.params.assign((*t)->params().begin(), (*t)->params().end());
  return out;
}

struct RingRun {
  std::vector<std::vector<StepMetrics>> steps;  // [peer][step]
  std::vector<std::vector<float>> momentum;     // [peer] at the end
  std::vector<std::vector<float>> params;       // [peer] at the end
};

RingRun TrainRing(const TrainConfig& c, int peers) {
  RingReducerOptions options;
  options.buckets.bucket_bytes = 6000;  // several buckets
  options.buckets.codec = c.round.codec;
  options.check_every = 1;  // the trainer asks at round ends only
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(peers);
  RingRun out;
  out.steps.resize(peers);
  out.momentum.resize(peers);
  out.params.resize(peers);
  std::vector<absl::Status> status(peers);
  // Destroyed after every peer is done: a trainer's end closes its links.
  std::vector<std::unique_ptr<Trainer>> trainers(peers);
  OnThreads(peers, [&](int r) {
    rt::train::testing::UseOneThread();
    auto created =
        Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), options));
    status[r] = created.status();
    if (!created.ok()) return;
    trainers[r] = std::move(*created);
    Trainer* t = trainers[r].get();
    while (t->step() < c.steps && status[r].ok()) {
      StepMetrics m;
      status[r] = t->TrainStep(&m);
      out.steps[r].push_back(m);
    }
    const absl::Span<const float> mom = t->round_sync()->momentum();
    out.momentum[r].assign(mom.begin(), mom.end());
    out.params[r].assign(t->params().begin(), t->params().end());
  });
  for (int r = 0; r < peers; ++r) {
    if (!status[r].ok()) MESSAGE("peer ", r, ": ", status[r].message());
    REQUIRE(status[r].ok());
  }
  return out;
}

}  // namespace

TEST_CASE(
    "overlap, one peer, outer lr 1, momentum 0: plain training's bits, shared one round late") {
  rt::train::testing::UseOneThread();
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig plain = rt::train::testing::TinyConfig(dir.path());
  plain.steps = 12;  // rounds end at 5, 10 and 12 (the last, which drains)
  const Alone want = TrainAlone(plain);
  TrainConfig c = OverlapConfig(dir.path(), 5, 1.0f, 0.0f, "none");
  c.steps = plain.steps;
  const Alone got = TrainAlone(c);
  for (int s = 0; s < c.steps; ++s) {
    INFO("step ", s + 1);
    if (s == 4) {
      CHECK(got.hashes[s] == want.initial);  // nothing applied yet: the start is shared
    } else if (s == 9) {
      CHECK(got.hashes[s] == want.hashes[4]);  // round 1's outer step, one round late
    } else {
      CHECK(got.hashes[s] == want.hashes[s]);  // the replica (and at 12 the drained end)
    }
  }
  CHECK(got.params == want.params);
  // The check can fail: the default outer step (lr 0.7, momentum 0.9) moves elsewhere.
  TrainConfig moved = OverlapConfig(dir.path(), 5, 0.7f, 0.9f, "none");
  moved.steps = plain.steps;
  const Alone other = TrainAlone(moved);
  CHECK(other.hashes[8] == want.hashes[8]);    // round 1's inner steps: not touched yet
  CHECK(other.hashes[10] != want.hashes[10]);  // after the delayed outer step
}

TEST_CASE("overlap, 3 peers: the shared parameters agree at every round's end, for every codec") {
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  for (const std::string codec : {"none", "bf16", "int8", "int4", "topk:0.1"}) {
    INFO(codec);
    TrainConfig c = OverlapConfig(dir.path(), 3, 0.7f, 0.9f, codec);
    c.steps = 11;  // rounds end at 3, 6, 9 and 11 (the last, which drains both)
    c.batch = 2;
    c.global_batch = 6;  // 2 sequences per peer per step
    const RingRun run = TrainRing(c, 3);
    bool differ_between = false;
    for (int s = 0; s < c.steps; ++s) {
      INFO("step ", s + 1);
      const bool round_end = (s + 1) % 3 == 0 || s + 1 == c.steps;
      const int64_t applied = s + 1 < 6 ? 0 : s + 1 < 9 ? 1 : s + 1 < 11 ? 2 : 4;
      CHECK(run.steps[0][s].outer_step == applied);
      for (int r = 1; r < 3; ++r) {
        if (round_end) {
          CHECK(run.steps[r][s].param_hash == run.steps[0][s].param_hash);
        } else {
          differ_between |= run.steps[r][s].param_hash != run.steps[0][s].param_hash;
        }
      }
      if (s + 1 == 6 || s + 1 == 9 || s + 1 == 11) {
        CHECK(run.steps[0][s].outer_bytes > 0);  // the exchange that ran beside the round
        CHECK(run.steps[0][s].pseudo_grad_norm > 0);
      }
    }
    CHECK(differ_between);
    CHECK(run.momentum[1] == run.momentum[0]);
    CHECK(run.momentum[2] == run.momentum[0]);
    CHECK(run.params[1] == run.params[0]);  // the last round drained: one model
    CHECK(run.params[2] == run.params[0]);
    if (codec == "none") {
      // The check can fail: without overlap the outer steps land elsewhere.
      TrainConfig plain_rounds = c;
      plain_rounds.round.overlap = false;
      const RingRun other = TrainRing(plain_rounds, 3);
      CHECK(other.steps[0][5].param_hash != run.steps[0][5].param_hash);
      CHECK(other.params[0] != run.params[0]);
    }
  }
}
