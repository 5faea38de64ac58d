// Round sync with the outer state sharded (--outer-shard on; sync/round_sync.h "Sharded
// outer state", train/trainer_round_shard.cc): in-process rings of 1, 3 and 4 peers
// give the bits of the unsharded ring at every step (param_hash on every peer), each
// peer holding only its pieces (and its predecessor's) of start and momentum, with the
// ring's momentum there; a sharded checkpoint holds the whole momentum, the same bytes
// as an unsharded one, and resumes at another peer count to the unsharded resume's bits.
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
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

TrainConfig ShardConfig(const std::string& data, bool shard) {
  TrainConfig c = rt::train::testing::TinyConfig(data);
  c.round.every = 3;
  c.round.outer_lr = 0.7f;
  c.round.outer_momentum = 0.9f;
  c.round.codec = *rt::collective::ParseCodecSpec("none");
  c.round.shard = shard;
  c.steps = 9;
  c.batch = 2;
  return c;
}

struct PeerRun {
  std::vector<StepMetrics> steps;
  std::vector<std::pair<size_t, size_t>> pieces;  // sharded: what the peer holds
  std::vector<float> momentum;                    // whole, or the pieces packed
  size_t floats = 0;                              // the parameters
};

RingReducerOptions Options() {
  RingReducerOptions options;
  options.buckets.bucket_bytes = 6000;  // several buckets, so several pieces per peer
  options.check_every = 1;
  return options;
}

// `peers` in-process peers train `c` with TrainStep up to c.steps.
std::vector<PeerRun> StepRing(const TrainConfig& c, int peers) {
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(peers);
  std::vector<PeerRun> out(peers);
  std::vector<absl::Status> status(peers);
  // Kept until every peer is done: a peer's last sends may still be in flight when
  // another peer's loop ends.
  std::vector<std::unique_ptr<Trainer>> trainers(peers);
  OnThreads(peers, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t =
        Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), Options()));
    status[r] = t.status();
    if (!t.ok()) return;
    trainers[r] = std::move(*t);
    Trainer* t_ = trainers[r].get();
    while (t_->step() < c.steps && status[r].ok()) {
      StepMetrics m;
      status[r] = t_->TrainStep(&m);
      out[r].steps.push_back(m);
    }
    const rt::sync::RoundSync* rs = t_->round_sync();
    out[r].pieces = rs->pieces();
    const absl::Span<const float> mom = rs->momentum();
    out[r].momentum.assign(mom.begin(), mom.end());
    out[r].floats = t_->params().size();
  });
  for (int r = 0; r < peers; ++r) {
    if (!status[r].ok()) MESSAGE("peer ", r, ": ", status[r].message());
    REQUIRE(status[r].ok());
  }
  return out;
}

// `peers` in-process peers Run() `c` (checkpoints at its --ckpt-every and the end).
void RunRing(const TrainConfig& c, int peers) {
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(peers);
  std::vector<absl::Status> status(peers);
  std::vector<std::unique_ptr<Trainer>> trainers(peers);  // as in StepRing
  OnThreads(peers, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t =
        Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), Options()));
    status[r] = t.ok() ? (*t)->Run() : t.status();
    if (t.ok()) trainers[r] = std::move(*t);
  });
  for (int r = 0; r < peers; ++r) {
    if (!status[r].ok()) MESSAGE("peer ", r, ": ", status[r].message());
    REQUIRE(status[r].ok());
  }
}

std::vector<uint8_t> Section(const std::string& dir, const std::string& name, int64_t step) {
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(dir, &problems);
  REQUIRE(ckpt.ok());
  CHECK(ckpt->meta().step == step);
  auto bytes = ckpt->ReadSectionBytes(name);
  REQUIRE(bytes.ok());
  return *bytes;
}

}  // namespace

TEST_CASE("--outer-shard on: 1, 3 and 4 peers give the unsharded bits at every step") {
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  for (int peers : {1, 3, 4}) {
    INFO(peers, " peers");
    TrainConfig plain = ShardConfig(dir.path(), false);
    plain.global_batch = 2 * peers;
    TrainConfig sharded = ShardConfig(dir.path(), true);
    sharded.global_batch = plain.global_batch;
    const std::vector<PeerRun> want = StepRing(plain, peers);
    const std::vector<PeerRun> got = StepRing(sharded, peers);
    const size_t n = want[0].floats;
    for (int r = 0; r < peers; ++r) {
      REQUIRE(got[r].steps.size() == want[r].steps.size());
      for (size_t s = 0; s < want[r].steps.size(); ++s) {
        INFO("peer ", r, " step ", s + 1);
        CHECK(got[r].steps[s].param_hash == want[r].steps[s].param_hash);
        CHECK(got[r].steps[s].outer_step == want[r].steps[s].outer_step);
        CHECK((got[r].steps[s].outer_bytes > 0) == (want[r].steps[s].outer_bytes > 0));
        // The norm's parts are added per owner: the same up to summation order.
        CHECK(got[r].steps[s].pseudo_grad_norm ==
              doctest::Approx(want[r].steps[s].pseudo_grad_norm).epsilon(1e-9));
      }
      // Each peer holds its pieces and its predecessor's: 2/N of the buffer (all alone),
      // with the ring's momentum there bit for bit.
      size_t held = 0;
      for (const auto& p : got[r].pieces) held += p.second - p.first;
      CHECK(held == got[r].momentum.size());
      if (peers == 1) {
        CHECK(held == n);
      } else {
        CHECK(held <= 2 * n / peers + 2 * 64);  // segments round up per bucket
        CHECK(held >= 2 * n / peers - 2 * 64);
      }
      size_t packed = 0;
      bool same = true;
      for (const auto& p : got[r].pieces) {
        same =
            same && std::memcmp(got[r].momentum.data() + packed, want[0].momentum.data() + p.first,
                                (p.second - p.first) * sizeof(float)) == 0;
        packed += p.second - p.first;
      }
      CHECK(same);
    }
    // The check can fail: the momentum is not zero after three outer steps.
    double norm = 0;
    for (float x : want[0].momentum) norm += static_cast<double>(x) * x;
    CHECK(norm > 0);
  }
}

TEST_CASE("--outer-shard on: checkpoints hold the whole momentum and resume at another count") {
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir / "data", 64, 6000, 500).empty());
  std::vector<uint8_t> params[2], momentum[2], resumed_params[2], resumed_momentum[2];
  for (int shard = 0; shard < 2; ++shard) {
    INFO("shard ", shard);
    TrainConfig c = ShardConfig(dir / "data", shard == 1);
    c.global_batch = 6;
    c.steps = 6;
    c.ckpt_every = 3;
    c.ckpt_dir = dir / (shard ? "sharded" : "plain");
    RunRing(c, 3);  // checkpoints at steps 3 and 6
    params[shard] = Section(c.ckpt_dir, "params", 6);
    momentum[shard] = Section(c.ckpt_dir, "outer_momentum", 6);
    // On 2 peers from there (and the 3-peer checkpoint's momentum, not zero).
    c.resume = true;
    c.steps = 9;
    RunRing(c, 2);
    resumed_params[shard] = Section(c.ckpt_dir, "params", 9);
    resumed_momentum[shard] = Section(c.ckpt_dir, "outer_momentum", 9);
  }
  CHECK(params[1] == params[0]);
  CHECK(momentum[1] == momentum[0]);
  CHECK(resumed_params[1] == resumed_params[0]);
  CHECK(resumed_momentum[1] == resumed_momentum[0]);
  CHECK(resumed_params[0] != params[0]);  // the resumed runs trained on
  std::vector<uint8_t> zeros(momentum[0].size(), 0);
  CHECK(momentum[0] != zeros);
}

TEST_CASE("--outer-shard on: a per-step checkpoint between round ends resumes as unsharded") {
  // Step 4 is no multiple of H = 3: the first round runs from the resume to step 6, with
  // the outer momentum from zero (the checkpoint has none), sharded or not.
  TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir / "data", 64, 6000, 500).empty());
  std::vector<uint8_t> params[2], momentum[2];
  for (int shard = 0; shard < 2; ++shard) {
    TrainConfig per_step = rt::train::testing::TinyConfig(dir / "data");
    per_step.batch = 2;
    per_step.global_batch = 6;
    per_step.steps = 4;
    per_step.ckpt_dir = dir / (shard ? "sharded" : "plain");
    RunRing(per_step, 3);
    TrainConfig c = ShardConfig(dir / "data", shard == 1);
    c.global_batch = 6;
    c.ckpt_dir = per_step.ckpt_dir;
    c.resume = true;
    RunRing(c, 3);
    params[shard] = Section(c.ckpt_dir, "params", 9);
    momentum[shard] = Section(c.ckpt_dir, "outer_momentum", 9);
  }
  CHECK(params[1] == params[0]);
  CHECK(momentum[1] == momentum[0]);
}

TEST_CASE("--outer-shard on is refused with a lossy codec or overlap, with the reason") {
  rt::sync::RoundSyncOptions o;
  o.every = 3;
  o.shard = true;
  CHECK(o.Validate().ok());
  o.codec = *rt::collective::ParseCodecSpec("bf16");
  absl::Status s = o.Validate();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).find("--outer-compress none") != std::string::npos);
  o.codec = *rt::collective::ParseCodecSpec("none");
  o.overlap = true;
  s = o.Validate();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).find("--outer-overlap off") != std::string::npos);
  CHECK(o.ToString().find("shard=on") != std::string::npos);
}
