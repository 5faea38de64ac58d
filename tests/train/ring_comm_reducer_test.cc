// RingGradientReducer with communication planning over loopback TCP rings:
// 3 Trainers with --compress auto probe their links, calibrate, agree, and plan the
// same codec per bucket; a ring re-formed in another order mid-run (ReplaceRing, as
// after a new cluster view) keeps the replicas bit-identical (param_hash compared
// every step) and the error-feedback residuals.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "collective/codec_planner.h"
#include "core/clock.h"
#include "net/inproc_ring_transport.h"
#include "net/net_test_util.h"
#include "train/ring_gradient_reducer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace {

using rt::net::TcpNode;
using rt::net::TcpRing;
using rt::train::RingGradientReducer;
using rt::train::RingReducerOptions;
using rt::train::StepMetrics;
using rt::train::TrainConfig;
using rt::train::Trainer;
using rt::train::testing::OnThreads;

std::vector<std::unique_ptr<TcpRing>> LoopbackRings(int n) {
  auto hosts = rt::net::testing::LoopbackHosts(n);
  std::vector<rt::net::TcpRingOptions> opts;
  for (int r = 0; r < n; ++r) opts.push_back(rt::net::testing::RingOptions(hosts, r));
  std::vector<std::unique_ptr<TcpRing>> rings;
  for (auto& r : rt::net::testing::FormRings(opts)) {
    REQUIRE_MESSAGE(r.ok(), r.status().message());
    rings.push_back(*std::move(r));
  }
  return rings;
}

// Short probes and a small calibration buffer: the test measures loopback in ~1 s.
RingReducerOptions AutoOptions() {
  RingReducerOptions o;
  o.buckets.bucket_bytes = 16384;  // several buckets of the tiny model
  o.check_every = 1;               // param_hash compared after every step
  o.comm.auto_codec = true;
  o.comm.probe_every = 2;
  o.comm.channel_salt = 0x1234;
  o.comm.probe.probe.pings = 3;
  o.comm.probe.probe.stream_time = absl::Milliseconds(5);
  o.comm.probe.probe.max_stream_bytes = size_t{2} << 20;
  o.comm.probe.probe.timeout = absl::Seconds(20);
  o.comm.calibration.floats = size_t{1} << 15;
  o.comm.calibration.repeats = 1;
  return o;
}

// Bitwise equality of what every peer planned from.
bool SamePlan(const rt::collective::CodecPlan& a, const rt::collective::CodecPlan& b) {
  if (a.buckets.size() != b.buckets.size()) return false;
  for (size_t i = 0; i < a.buckets.size(); ++i) {
    if (!(a.buckets[i].spec == b.buckets[i].spec)) return false;
  }
  const auto &x = a.inputs, &y = b.inputs;
  return x.peers == y.peers && std::memcmp(&x.bandwidth_bps, &y.bandwidth_bps, 8) == 0 &&
         std::memcmp(&x.rtt_s, &y.rtt_s, 8) == 0 && std::memcmp(&x.budget_s, &y.budget_s, 8) == 0 &&
         std::memcmp(&x.speeds.select_bps, &y.speeds.select_bps, 8) == 0 &&
         std::memcmp(&a.predicted_s, &b.predicted_s, 8) == 0;
}

}  // namespace

TEST_CASE(
    "auto codec over a TCP ring: same plan on every peer, bit-identical replicas, and a ring "
    "re-formed in another order mid-run keeps them identical") {
  rt::train::testing::UseOneThread();
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  c.steps = 7;
  const int n = 3;

  for (bool reorder : {false, true}) {
    CAPTURE(reorder);
    auto rings = LoopbackRings(n);
    std::vector<std::shared_ptr<TcpNode>> nodes;
    std::vector<RingGradientReducer*> reducers;
    std::vector<std::unique_ptr<Trainer>> trainers(n);
    std::vector<absl::Status> status(n);
    std::vector<std::vector<int>> ranks(n);
    std::vector<std::vector<std::vector<int>>> orders(n);  // ring order after each BeginStep
    std::vector<std::vector<rt::collective::CodecPlan>> plans(n);
    std::vector<std::unique_ptr<RingGradientReducer>> owned;
    for (int r = 0; r < n; ++r) {
      nodes.push_back(rings[r]->node());
      RingReducerOptions o = AutoOptions();
      o.comm.reorder = reorder;
      owned.push_back(std::make_unique<RingGradientReducer>(std::move(rings[r]), o));
      reducers.push_back(owned.back().get());
    }
    const std::vector<int> reversed = {0, 2, 1};  // the same members, another ring order
    OnThreads(n, [&](int r) {
      rt::train::testing::UseOneThread();
      auto t = Trainer::Create(c, std::move(owned[r]));
      status[r] = t.status();
      if (!t.ok()) return;
      trainers[r] = std::move(*t);
      for (int s = 0; s < c.steps && status[r].ok(); ++s) {
        if (s == 4) {  // between steps, as a new cluster view would
          auto ring = TcpRing::Form(nodes[r], reversed, /*channel=*/0x52000000'00000777ull,
                                    absl::Seconds(20));
          status[r] = ring.ok() ? reducers[r]->ReplaceRing(*std::move(ring), 0x777) : ring.status();
          if (!status[r].ok()) return;
        }
        StepMetrics m;
        status[r] = trainers[r]->TrainStep(&m);  // compares param_hash over the ring each step
        ranks[r].push_back(m.rank);
        orders[r].push_back(reducers[r]->ring_order());
        if (reducers[r]->plan() != nullptr) plans[r].push_back(*reducers[r]->plan());
      }
    });
    for (int r = 0; r < n; ++r) REQUIRE_MESSAGE(status[r].ok(), status[r].message());
    for (int r = 1; r < n; ++r) {
      CHECK(std::memcmp(trainers[0]->params().data(), trainers[r]->params().data(),
                        trainers[0]->params().size() * sizeof(float)) == 0);
    }
    // Every peer planned every step, identically (same inputs bit for bit).
    for (int r = 0; r < n; ++r) {
      REQUIRE(plans[r].size() == static_cast<size_t>(c.steps));
      for (int s = 0; s < c.steps; ++s) {
        INFO("peer " << r << " step " << s);
        CHECK(SamePlan(plans[r][s], plans[0][s]));
      }
    }
    // The first plan has no measurement (budget 0), later ones the measured backward.
    CHECK(plans[0][0].inputs.budget_s == 0);
    CHECK(plans[0][2].inputs.budget_s > 0);
    CHECK(plans[0][0].inputs.bandwidth_bps > 0);
    // Every step, each peer's position is its place in the ring order in use, the
    // same order on every peer (with re-ordering on, probes may change it: loopback
    // links differ by noise).
    for (int r = 0; r < n; ++r) {
      for (int s = 0; s < c.steps; ++s) {
        INFO("peer " << r << " step " << s);
        CHECK(orders[r][s] == orders[0][s]);
        REQUIRE(orders[r][s].size() == static_cast<size_t>(n));
        CHECK(orders[r][s][ranks[r][s]] == r);
        // Without re-ordering by probes, only ReplaceRing changes the order.
        if (!reorder) CHECK(orders[r][s] == (s >= 4 ? reversed : std::vector<int>{0, 1, 2}));
      }
    }
    CHECK(reducers[0]->bytes_sent() > 0);
    // The status board's link figures: each peer's row of the last probe, one link to
    // every other member, named by its hosts-file endpoint.
    for (int r = 0; r < n; ++r) {
      INFO("peer " << r);
      const std::vector<rt::observe::LinkFigure> links = reducers[r]->ProbedLinks();
      REQUIRE(links.size() == static_cast<size_t>(n - 1));
      std::vector<std::string> expected, seen;
      for (int h = 0; h < n; ++h) {
        if (h != r) expected.push_back(nodes[r]->Host(h).Endpoint());
      }
      for (const auto& l : links) {
        seen.push_back(l.to);
        CHECK(l.bytes_per_s > 0);
        CHECK(l.rtt_s > 0);
      }
      CHECK(seen == expected);
    }
  }
}

TEST_CASE(
    "auto learns like fixed top-k: the first plan is none, no top-k in the warm-up, every "
    "bucket preconditioned after it, replicas and AdamW state identical") {
  rt::train::testing::UseOneThread();
  rt::train::testing::TempDir dir;
  REQUIRE(rt::train::testing::WriteMarkovData(dir.path(), 64, 6000, 500).empty());
  TrainConfig c = rt::train::testing::TinyConfig(dir.path());
  c.steps = 9;
  const int n = 3, warmup = 3;
  auto rings = LoopbackRings(n);
  std::vector<std::unique_ptr<RingGradientReducer>> owned;
  std::vector<RingGradientReducer*> reducers;
  for (int r = 0; r < n; ++r) {
    RingReducerOptions o = AutoOptions();
    o.buckets.topk_warmup_steps = warmup;  // as ApplyCommFlags sets for --compress auto
    o.buckets.precondition_from = warmup;
    // A budget of ~0 asks for the fastest plan once measured; over a 1 MB/s link
    // that is top-k, however slow a loaded (or sanitized) machine makes the codecs.
    o.comm.comm_budget = 1e-9;
    o.comm.planning_bandwidth_bps = 1e6;
    o.comm.planner.allow_bf16 = false;
    owned.push_back(std::make_unique<RingGradientReducer>(std::move(rings[r]), o));
    reducers.push_back(owned.back().get());
  }
  std::vector<std::unique_ptr<Trainer>> trainers(n);
  std::vector<absl::Status> status(n);
  std::vector<std::vector<rt::collective::CodecPlan>> plans(n);
  OnThreads(n, [&](int r) {
    rt::train::testing::UseOneThread();
    auto t = Trainer::Create(c, std::move(owned[r]));
    status[r] = t.status();
    if (!t.ok()) return;
    trainers[r] = std::move(*t);
    for (int s = 0; s < c.steps && status[r].ok(); ++s) {
      StepMetrics m;
      status[r] = trainers[r]->TrainStep(&m);
      if (reducers[r]->plan() != nullptr) plans[r].push_back(*reducers[r]->plan());
    }
  });
  for (int r = 0; r < n; ++r) REQUIRE_MESSAGE(status[r].ok(), status[r].message());
  CHECK(reducers[0]->PreconditionFrom() == warmup);
  REQUIRE(plans[0].size() == static_cast<size_t>(c.steps));
  // Step 0 has no measurement: none everywhere, not the fastest (sparsest) codec.
  CHECK_FALSE(plans[0][0].inputs.measured);
  for (const auto& b : plans[0][0].buckets) CHECK(b.spec.kind == rt::collective::CodecKind::kNone);
  bool topk_after = false;
  for (int s = 0; s < c.steps; ++s) {
    for (const auto& b : plans[0][s].buckets) {
      const bool topk = b.spec.kind == rt::collective::CodecKind::kTopK;
      if (s < warmup) CHECK_MESSAGE(!topk, "top-k planned at step ", s, " in the warm-up");
      topk_after = topk_after || (s >= warmup && topk);
    }
  }
  CHECK(topk_after);
  // Preconditioned steps with codecs mixed by the plan keep every byte identical,
  // AdamW's moments included (v learned on the dense buckets, frozen on top-k ones).
  for (int r = 1; r < n; ++r) {
    CHECK(std::memcmp(trainers[0]->params().data(), trainers[r]->params().data(),
                      trainers[0]->params().size() * sizeof(float)) == 0);
    const auto v0 = trainers[0]->optimizer().v(), vr = trainers[r]->optimizer().v();
    CHECK(std::memcmp(v0.data(), vr.data(), v0.size() * sizeof(float)) == 0);
    const auto m0 = trainers[0]->optimizer().m(), mr = trainers[r]->optimizer().m();
    CHECK(std::memcmp(m0.data(), mr.data(), m0.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("a reducer over a non-TCP transport refuses auto with a clear error") {
  auto ring = rt::net::MakeInProcessRing(2);
  RingReducerOptions o;
  o.comm.auto_codec = true;
  std::vector<absl::Status> status(2);
  std::vector<float> g0(100, 1.0f), g1(100, 1.0f);
  std::vector<std::unique_ptr<RingGradientReducer>> reducers;
  for (auto& t : ring) reducers.push_back(std::make_unique<RingGradientReducer>(std::move(t), o));
  status[0] = reducers[0]->BeginStep(0, absl::MakeSpan(g0));
  CHECK_FALSE(status[0].ok());
  CHECK(std::string(status[0].message()).find("auto") != std::string::npos);
}

TEST_CASE("Abort from another thread ends a probe and a gradient exchange promptly") {
  for (bool in_exchange : {false, true}) {
    CAPTURE(in_exchange);
    auto rings = LoopbackRings(2);
    RingReducerOptions o = AutoOptions();
    o.comm.auto_codec = false;
    o.comm.probe_every = in_exchange ? -1 : 1;  // probe at the first step, or never
    o.buckets.allreduce.timeout = absl::Seconds(60);
    o.comm.probe.probe.timeout = absl::Seconds(60);
    RingGradientReducer reducer(std::move(rings[0]), o);  // peer 1 never takes part
    std::vector<float> grads(1000, 1.0f);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      reducer.Abort(absl::AbortedError("view changed"));
    });
    rt::Stopwatch watch;
    absl::Status st = reducer.BeginStep(0, absl::MakeSpan(grads));
    if (st.ok()) {
      reducer.OnGradReady(0);
      rt::train::StepTotals totals;
      st = reducer.Finish(&totals);
    }
    aborter.join();
    CHECK(watch.ElapsedSeconds() < 10);
    REQUIRE_FALSE(st.ok());
    CHECK(std::string(st.message()).find("view changed") != std::string::npos);
    std::vector<float> more(1000);
    CHECK_FALSE(reducer.BeginStep(1, absl::MakeSpan(more)).ok());  // stays aborted
  }
}
