// ZeRO stage 1 (RingReducerOptions::shard_optimizer, optim/sharded_adamw.h): 3 and 4
// in-process peers with dense and bf16 gradients, sharded against unsharded. Every
// step's param_hash must be the same in both modes and on every peer (DESIGN
// invariant 3: sharding never changes the math), with clipping active (the global
// norm is summed from the owners' pieces); each peer keeps only its pieces' moments,
// plus a replica of its predecessor's that equals the owner's bit for bit. ShardedAdamW alone: the
// same bits as AdamW over the whole buffer.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "collective/codec_spec.h"
#include "net/inproc_ring_transport.h"
#include "optim/adamw.h"
#include "optim/sharded_adamw.h"
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

struct RunResult {
  std::vector<std::vector<std::string>> hashes;  // [peer][step]
  std::vector<size_t> moment_floats;             // per peer: floats of m (and of v)
  // per peer: its own pieces' m and v, then the replica's (of its predecessor's pieces)
  std::vector<std::vector<float>> own_m, own_v, replica_m, replica_v;
  std::vector<double> grad_norm;  // peer 0, per step
  size_t param_floats = 0;
  uint64_t bytes_step2 = 0;  // peer 0's bytes of step 2
};

RunResult Train(const TrainConfig& c, int peers, const std::string& codec, bool shard) {
  RingReducerOptions options;
  options.buckets.bucket_bytes = 6000;  // many buckets, lengths not multiples of the peers
  options.buckets.codec = *rt::collective::ParseCodecSpec(codec);
  options.check_every = 1;  // replicas compared every step
  options.shard_optimizer = shard;
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(peers);
  RunResult out;
  out.hashes.resize(peers);
  out.moment_floats.resize(peers);
  out.own_m.resize(peers), out.own_v.resize(peers);
  out.replica_m.resize(peers), out.replica_v.resize(peers);
  std::vector<absl::Status> status(peers);
  // Destroyed after every thread is done: a peer's last collective may still be sending
  // to the others when it returns.
  std::vector<std::unique_ptr<Trainer>> trainers(peers);
  OnThreads(peers, [&](int r) {
    rt::train::testing::UseOneThread();
    auto created =
        Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), options));
    status[r] = created.status();
    if (!created.ok()) return;
    trainers[r] = std::move(*created);
    Trainer* t = trainers[r].get();
    for (int s = 0; s < c.steps && status[r].ok(); ++s) {
      StepMetrics m;
      status[r] = t->TrainStep(&m);
      out.hashes[r].push_back(m.param_hash);
      if (r == 0) out.grad_norm.push_back(m.grad_norm);
      if (r == 0 && s == 1) out.bytes_step2 = m.bytes_sent;
    }
    auto flatten = [](const rt::optim::ShardedAdamW* o, std::vector<float>* m,
                      std::vector<float>* v) {
      for (size_t i = 0; o != nullptr && i < o->ranges().size(); ++i) {
        m->insert(m->end(), o->shard(i).m().begin(), o->shard(i).m().end());
        v->insert(v->end(), o->shard(i).v().begin(), o->shard(i).v().end());
      }
    };
    flatten(t->sharded_optimizer(), &out.own_m[r], &out.own_v[r]);
    flatten(t->replica_optimizer(), &out.replica_m[r], &out.replica_v[r]);
    out.moment_floats[r] = shard && t->sharded_optimizer() != nullptr
                               ? t->sharded_optimizer()->owned_floats()
                               : t->optimizer().m().size();
    if (r == 0) out.param_floats = t->params().size();
  });
  for (int r = 0; r < peers; ++r) {
    if (!status[r].ok()) MESSAGE("peer ", r, ": ", status[r].message());
  }
  for (int r = 0; r < peers; ++r) REQUIRE(status[r].ok());
  return out;
}

}  // namespace

TEST_CASE("--zero 1 equals --zero 0 bit for bit: 3 and 4 peers, dense and bf16, clipping on") {
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  c.steps = 6;
  c.clip = 0.05f;  // below the norms of these steps: the clip scale is used every step
  for (int peers : {3, 4}) {
    for (const std::string codec : {"none", "bf16"}) {
      INFO(peers, " peers, ", codec);
      const RunResult plain = Train(c, peers, codec, false);
      const RunResult sharded = Train(c, peers, codec, true);
      for (double norm : plain.grad_norm) CHECK(norm > c.clip);
      for (int r = 0; r < peers; ++r) {
        CHECK(sharded.hashes[r] == plain.hashes[0]);
        CHECK(plain.hashes[r] == plain.hashes[0]);
      }
      CHECK(sharded.grad_norm == plain.grad_norm);
      // Moments: 1/N of the buffer per peer (pieces differ by at most one float per
      // bucket), all of it without sharding; the pieces cover the buffer once.
      size_t total = 0;
      for (int r = 0; r < peers; ++r) {
        total += sharded.moment_floats[r];
        CHECK(sharded.moment_floats[r] <= plain.param_floats / peers + 64);
        CHECK(plain.moment_floats[r] == plain.param_floats);
      }
      CHECK(total == plain.param_floats);
      // Each peer's replica is its predecessor's state, bit for bit, and not all zeros.
      for (int r = 0; r < peers; ++r) {
        const int prev = (r + peers - 1) % peers;
        CHECK(sharded.replica_m[r] == sharded.own_m[prev]);
        CHECK(sharded.replica_v[r] == sharded.own_v[prev]);
        CHECK(std::any_of(sharded.replica_v[r].begin(), sharded.replica_v[r].end(),
                          [](float x) { return x > 0; }));
      }
      MESSAGE(peers, " peers ", codec, ": bytes per step, peer 0: unsharded ", plain.bytes_step2,
              ", sharded ", sharded.bytes_step2);
    }
  }
}

TEST_CASE("--zero 1 refuses top-k and auto with a message") {
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  RingReducerOptions options;
  options.buckets.codec = *rt::collective::ParseCodecSpec("topk:0.01");
  options.shard_optimizer = true;
  std::vector<std::unique_ptr<rt::net::RingTransport>> ring = rt::net::MakeInProcessRing(2);
  std::vector<absl::Status> status(2);
  std::vector<std::unique_ptr<Trainer>> trainers(2);  // outlive both threads
  OnThreads(2, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t = Trainer::Create(c, std::make_unique<RingGradientReducer>(std::move(ring[r]), options));
    status[r] = t.status();
    if (!t.ok()) return;
    trainers[r] = std::move(*t);
    StepMetrics m;
    status[r] = trainers[r]->TrainStep(&m);
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(!status[r].ok());
    INFO(status[r].message());
    CHECK(std::string(status[r].message()).find("--zero 1 works with --compress none or bf16") !=
          std::string::npos);
  }
}

TEST_CASE("ShardedAdamW over pieces gives AdamW's bits and keeps only the pieces' moments") {
  const size_t n = 10007;
  const std::vector<rt::optim::FloatRange> decay = {{100, 4000}, {5000, 9000}};
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p0(n), g(n);
  for (size_t i = 0; i < n; ++i) p0[i] = normal(gen), g[i] = normal(gen) * 0.01f;
  rt::optim::AdamW full({}, n, decay);
  std::vector<float> p_full = p0, p_shard = p0;
  // Pieces that cut decay ranges and leave gaps (others' pieces).
  const std::vector<rt::optim::FloatRange> pieces = {{0, 150}, {3990, 5001}, {8999, 10007}};
  rt::optim::ShardedAdamW shard({}, n, pieces, decay);
  CHECK(shard.owned_floats() == 150 + 1011 + 1008);
  for (int t = 1; t <= 3; ++t) {
    full.Step(absl::MakeSpan(p_full), g, 1e-2f, t, 0.5f);
    shard.Step(absl::MakeSpan(p_shard), g, 1e-2f, t, 0.5f);
  }
  for (size_t k = 0; k < pieces.size(); ++k) {
    for (size_t i = pieces[k].first; i < pieces[k].second; ++i) {
      REQUIRE(p_shard[i] == p_full[i]);
      REQUIRE(shard.shard(k).m()[i - pieces[k].first] == full.m()[i]);
      REQUIRE(shard.shard(k).v()[i - pieces[k].first] == full.v()[i]);
    }
  }
  CHECK(p_shard[200] == p0[200]);  // outside the pieces: untouched
  CHECK(p_shard[9000] != p0[9000]);
}
