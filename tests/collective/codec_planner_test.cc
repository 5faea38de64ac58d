// Codec planner and calibration: fast links stay uncompressed, 100 Mbit/s with a
// 124M-parameter model goes top-k, sparse loses to dense as N grows, zstd only where
// it pays, identical plans on every peer, hysteresis, measured times over predictions,
// input validation.
#include "collective/codec_planner.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "collective/codec_calibration.h"
#include "core/clock.h"
#include "ring_test_util.h"

namespace {

using namespace rt::collective;

// A GPT-2 124M-like gradient: 124.4M floats in ~25 MB buckets, 1% dense (biases, LN).
std::vector<PlanBucket> Gpt124mBuckets() {
  std::vector<PlanBucket> buckets;
  size_t left = 124'439'808;
  while (left > 0) {
    const size_t n = std::min<size_t>(left, 6'553'600);
    buckets.push_back(PlanBucket{n, n / 100});
    left -= n;
  }
  return buckets;
}

PlannerInputs Inputs(int peers, double bw_bps, double budget_s) {
  PlannerInputs in;
  in.buckets = Gpt124mBuckets();
  in.peers = peers;
  in.bandwidth_bps = bw_bps;
  in.rtt_s = 2e-4;
  in.budget_s = budget_s;
  in.speeds.profiles = {
      {0.1, 2.5, 2.2}, {0.03, 2.7, 2.3}, {0.01, 2.9, 2.4}, {0.003, 3.1, 2.5}, {0.001, 3.4, 2.6}};
  return in;
}

bool AllKind(const CodecPlan& plan, CodecKind kind) {
  for (const auto& b : plan.buckets) {
    if (b.spec.kind != kind) return false;
  }
  return true;
}

bool SamePlan(const CodecPlan& a, const CodecPlan& b) {
  if (a.buckets.size() != b.buckets.size()) return false;
  for (size_t i = 0; i < a.buckets.size(); ++i) {
    if (!(a.buckets[i].spec == b.buckets[i].spec)) return false;
    if (std::memcmp(&a.buckets[i].predicted_s, &b.buckets[i].predicted_s, sizeof(double)) != 0)
      return false;
  }
  return true;
}

}  // namespace

TEST_CASE("codec planner: a fast link keeps every bucket uncompressed") {
  auto plan = PlanCodecs(Inputs(2, 3e9, 1.0), PlannerOptions{});  // loopback-like, 1 s backward
  REQUIRE(plan.ok());
  CHECK(AllKind(*plan, CodecKind::kNone));
  CHECK(plan->fits);
  for (const auto& line : DescribePlan(*plan)) MESSAGE(line);
  // Alone: nothing to send, nothing to compress.
  auto alone = PlanCodecs(Inputs(1, 0, 0.0), PlannerOptions{});
  REQUIRE(alone.ok());
  CHECK(AllKind(*alone, CodecKind::kNone));
  CHECK(alone->predicted_s == 0);
}

TEST_CASE("codec planner: 100 Mbit/s with a 124M model chooses top-k and fits the budget") {
  // A 124M step on CPUs takes tens of seconds; 5 s of backward to hide behind.
  auto in = Inputs(4, 12.5e6, 5.0);
  auto plan = PlanCodecs(in, PlannerOptions{});
  REQUIRE(plan.ok());
  for (const auto& line : DescribePlan(*plan)) MESSAGE(line);
  CHECK(AllKind(*plan, CodecKind::kTopK));
  CHECK(plan->fits);
  double none_s = 0;
  for (const auto& b : plan->buckets) none_s += b.predicted_none_s;
  CHECK(none_s > 30);  // dense would take ~1 minute
  // The least lossy plan that fits: making any bucket one rung less lossy breaks the budget
  // or is impossible, i.e. the plan is not needlessly lossy.
  const std::vector<double> ladder = PlannerOptions{}.densities;
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    const CodecSpec& s = plan->buckets[b].spec;
    auto it = std::find(ladder.begin(), ladder.end(), s.density);
    REQUIRE(it != ladder.end());
    if (it == ladder.begin()) continue;
    CodecSpec looser = s;
    looser.density = *(it - 1);
    double total = plan->predicted_s - plan->buckets[b].predicted_s;
    double looser_s = std::min(PredictBucketSeconds(in.buckets[b], looser, in),
                               PredictBucketSeconds(
                                   in.buckets[b],
                                   [&] {
                                     CodecSpec z = looser;
                                     z.zstd_level = z.zstd_level > 0 ? 0 : in.speeds.zstd_level;
                                     return z;
                                   }(),
                                   in));
    CHECK(total + looser_s > in.budget_s);
  }
  // A generous budget relaxes the density; a tiny one gives the fastest plan, flagged.
  auto relaxed = PlanCodecs(Inputs(4, 12.5e6, 30.0), PlannerOptions{});
  REQUIRE(relaxed.ok());
  CHECK(relaxed->predicted_s > plan->predicted_s);
  CHECK(relaxed->buckets[0].spec.density > plan->buckets[0].spec.density);
  auto tight = PlanCodecs(Inputs(4, 12.5e6, 1e-3), PlannerOptions{});
  REQUIRE(tight.ok());
  CHECK_FALSE(tight->fits);
  CHECK(tight->predicted_s <= plan->predicted_s);
  CHECK(DescribePlan(*tight).back().find("does not fit") != std::string::npos);
}

TEST_CASE("codec planner: zstd only where the link is slower than zstd") {
  auto in = Inputs(4, 12.5e6, 0);
  PlanBucket b{6'553'600, 0};
  CodecSpec plain{CodecKind::kTopK, 0.01, 0}, zstd{CodecKind::kTopK, 0.01, 1};
  CHECK(PredictBucketSeconds(b, zstd, in) < PredictBucketSeconds(b, plain, in));
  auto plan = PlanCodecs(in, PlannerOptions{});
  REQUIRE(plan.ok());
  CHECK(plan->buckets[0].spec.zstd_level == 1);
  in.bandwidth_bps = 20e9;
  CHECK(PredictBucketSeconds(b, zstd, in) > PredictBucketSeconds(b, plain, in));
  PlannerOptions topk_only;
  topk_only.allow_bf16 = false;
  topk_only.densities = {0.001};
  in.budget_s = 0;  // fastest: forces the choice between none and topk:0.001[+zstd]
  in.speeds.add_bps = 1e12;
  auto fast = PlanCodecs(in, topk_only);
  REQUIRE(fast.ok());
  for (const auto& c : fast->buckets) CHECK(c.spec.zstd_level == 0);
}

TEST_CASE("codec planner: sparse cost grows with N, dense wins beyond a crossover") {
  PlannerOptions o;
  o.allow_bf16 = false;
  o.densities = {0.02};
  PlanBucket bucket{25'000'000, 0};
  int crossover = -1;
  double last_sparse = 0;
  for (int n = 2; n < 100; ++n) {  // N * 0.02 < 2
    PlannerInputs in = Inputs(n, 300e6, 0.0);
    in.buckets = {bucket};
    const double sparse = PredictBucketSeconds(bucket, CodecSpec{CodecKind::kTopK, 0.02, 0}, in);
    const double dense = PredictBucketSeconds(bucket, CodecSpec{}, in);
    CHECK(sparse > last_sparse);  // grows with N
    last_sparse = sparse;
    auto plan = PlanCodecs(in, o);
    REQUIRE(plan.ok());
    const bool sparse_chosen = plan->buckets[0].spec.kind == CodecKind::kTopK;
    CHECK(sparse_chosen ==
          (std::min(sparse, PredictBucketSeconds(bucket, CodecSpec{CodecKind::kTopK, 0.02, 1},
                                                 in)) < dense));
    if (!sparse_chosen && crossover < 0) crossover = n;
    if (crossover > 0) CHECK_FALSE(sparse_chosen);  // stays dense above the crossover
  }
  MESSAGE("300 MB/s, 25M floats, topk:0.02: dense from N = " << crossover);
  CHECK(crossover > 2);
  CHECK(crossover < 100);
  // N * D >= 2: never sparse (the exchange would run dense anyway).
  PlannerInputs big = Inputs(200, 1e6, 0.0);
  big.buckets = {bucket};
  auto plan = PlanCodecs(big, o);
  REQUIRE(plan.ok());
  CHECK(plan->buckets[0].spec.kind == CodecKind::kNone);
}

TEST_CASE("codec planner: hysteresis keeps the plan under measurement noise") {
  PlannerOptions o;
  auto base = Inputs(4, 12.5e6, 5.0);
  auto plan = PlanCodecs(base, o);
  REQUIRE(plan.ok());
  CodecPlan current = *plan;
  for (int i = 0; i < 20; ++i) {
    auto in = base;
    in.bandwidth_bps *= (i % 2 == 0) ? 1.15 : 0.87;  // +-15% noise
    in.rtt_s *= (i % 3 == 0) ? 1.2 : 0.9;
    bool replanned = true;
    auto next = Replan(current, in, o, &replanned);
    REQUIRE(next.ok());
    CHECK_FALSE(replanned);
    for (size_t b = 0; b < next->buckets.size(); ++b)
      CHECK(next->buckets[b].spec == plan->buckets[b].spec);
    current = *next;
  }
  // A real change (link 4x faster) re-plans, to a less lossy plan.
  auto faster = base;
  faster.bandwidth_bps *= 4;
  bool replanned = false;
  auto next = Replan(current, faster, o, &replanned);
  REQUIRE(next.ok());
  CHECK(replanned);
  CHECK(next->buckets[0].spec.density > plan->buckets[0].spec.density);
  // Slow drift is measured from the inputs of the last plan, so it re-plans eventually.
  auto drifted = base;
  drifted.bandwidth_bps *= 1.5;
  CHECK(Replan(current, drifted, o, &replanned).ok());
  CHECK(replanned);
  // Other buckets: always re-plan.
  auto reshaped = base;
  reshaped.buckets.pop_back();
  CHECK(Replan(current, reshaped, o, &replanned).ok());
  CHECK(replanned);
}

TEST_CASE("codec planner: same inputs give the same plan -- invalid inputs are refused") {
  auto in = Inputs(3, 50e6, 0.5);
  auto a = PlanCodecs(in, PlannerOptions{});
  auto b = PlanCodecs(in, PlannerOptions{});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(SamePlan(*a, *b));
  CHECK(DescribePlan(*a) == DescribePlan(*b));

  auto bad = in;
  bad.bandwidth_bps = 0;
  CHECK_FALSE(PlanCodecs(bad, PlannerOptions{}).ok());
  bad = in;
  bad.rtt_s = std::nan("");
  CHECK_FALSE(PlanCodecs(bad, PlannerOptions{}).ok());
  bad = in;
  bad.speeds.select_bps = -1;
  CHECK_FALSE(PlanCodecs(bad, PlannerOptions{}).ok());
  PlannerOptions unsorted;
  unsorted.densities = {0.01, 0.1};
  CHECK_FALSE(PlanCodecs(in, unsorted).ok());
  unsorted.densities = {};
  CHECK_FALSE(PlanCodecs(in, unsorted).ok());
}

TEST_CASE("codec planner: measured times override the model -- and are validated") {
  auto in = Inputs(4, 12.5e6, 0);  // budget 0: the fastest codec
  in.buckets = {PlanBucket{6'553'600, 0}, PlanBucket{6'553'600, 0}};
  const PlannerOptions po;
  const std::vector<CodecSpec> fastest = FastestCandidates(in, po, 0, 3);
  // The three favourites, then the sparsest top-k density if it is not among them.
  REQUIRE(fastest.size() >= 3);
  REQUIRE(fastest.size() <= 4);
  CHECK(std::count_if(fastest.begin(), fastest.end(), [&](const CodecSpec& c) {
          return c.kind == CodecKind::kTopK && c.density == po.densities.back();
        }) >= 1);
  const std::set<std::string> distinct{fastest[0].ToString(), fastest[1].ToString(),
                                       fastest[2].ToString()};
  CHECK(distinct.size() == 3);
  // The favourite is the model's fastest; with zstd on, a top-k favourite is followed by
  // its other zstd choice (timed too: the model knows zstd's cost least); then by speed.
  for (const CodecSpec& c : FastestCandidates(in, po, 0, 8)) {
    CHECK(PredictBucketSeconds(in.buckets[0], fastest[0], in) <=
          PredictBucketSeconds(in.buckets[0], c, in));
  }
  REQUIRE(in.speeds.zstd_level > 0);
  REQUIRE(fastest[0].kind == CodecKind::kTopK);
  CHECK(fastest[1].kind == CodecKind::kTopK);
  CHECK(fastest[1].density == fastest[0].density);
  CHECK(fastest[1].zstd_level != fastest[0].zstd_level);
  CHECK(PredictBucketSeconds(in.buckets[0], fastest[0], in) <=
        PredictBucketSeconds(in.buckets[0], fastest[2], in));
  {  // zstd off: no twin, just the fastest rungs in order
    auto plain = in;
    plain.speeds.zstd_level = 0;
    std::vector<CodecSpec> f = FastestCandidates(plain, po, 0, 3);
    REQUIRE(f.size() >= 3);
    if (f.size() == 4) {  // the sparsest density, timed beyond the three
      CHECK(f.back().kind == CodecKind::kTopK);
      CHECK(f.back().density == po.densities.back());
      f.pop_back();
    }
    for (size_t i = 1; i < f.size(); ++i) {
      CHECK(f[i].zstd_level == 0);
      const bool twin = f[i].kind == CodecKind::kTopK && f[i].density == f[0].density;
      CHECK_FALSE(twin);
      CHECK(PredictBucketSeconds(plain.buckets[0], f[i - 1], plain) <=
            PredictBucketSeconds(plain.buckets[0], f[i], plain));
    }
  }
  auto predicted = PlanCodecs(in, po);
  REQUIRE(predicted.ok());
  CHECK(predicted->buckets[0].spec == fastest[0]);
  // Bucket 0's trials say the model's favourite is slow and its second is fastest;
  // bucket 1 has no measurement and keeps the model's choice.
  in.measured_s = {{{fastest[0].ToString(), 10.0}, {fastest[1].ToString(), 1e-3}}, {}};
  CHECK(BucketSeconds(0, fastest[1], in) == 1e-3);
  CHECK(BucketSeconds(0, fastest[2], in) == PredictBucketSeconds(in.buckets[0], fastest[2], in));
  CHECK(BucketSeconds(1, fastest[0], in) == PredictBucketSeconds(in.buckets[1], fastest[0], in));
  auto measured = PlanCodecs(in, po);
  REQUIRE(measured.ok());
  for (const auto& line : DescribePlan(*measured)) MESSAGE(line);
  CHECK(measured->buckets[0].spec == fastest[1]);
  CHECK(measured->buckets[0].predicted_s == 1e-3);
  CHECK(measured->buckets[1].spec == fastest[0]);

  auto bad = in;
  bad.measured_s.pop_back();  // not one map per bucket
  CHECK_FALSE(PlanCodecs(bad, po).ok());
  bad = in;
  bad.measured_s[0][fastest[2].ToString()] = std::nan("");
  CHECK_FALSE(PlanCodecs(bad, po).ok());
  bad.measured_s[0][fastest[2].ToString()] = -1;
  CHECK_FALSE(PlanCodecs(bad, po).ok());
}

TEST_CASE(
    "codec planner: the sparsest top-k density is timed even when a noisy figure ranks it low") {
  // The speeds 4 peers on 2 cores agreed on in a comm-bench run (124M floats, unshaped
  // loopback), except that one peer's select speed at density 0.001 came out at half its
  // usual value (1.34 GB/s where the other runs measured 2.5): the model ranked
  // topk:0.001 behind three others, and auto never timed the codec that was fastest.
  PlannerInputs in;
  in.buckets = {PlanBucket{124'000'000, 0}};
  in.peers = 4;
  in.bandwidth_bps = 678.6e6;
  in.rtt_s = 1.2e-4;
  in.budget_s = 0;
  in.speeds.profiles = {{0.1, 2.53, 1.65, 0.57e9},
                        {0.03, 2.77, 1.71, 1.35e9},
                        {0.01, 3.07, 1.97, 1.80e9},
                        {0.003, 3.50, 2.38, 2.79e9},
                        {0.001, 3.97, 2.46, 1.34e9}};
  const PlannerOptions po;
  const CodecSpec sparse{CodecKind::kTopK, 0.001, 0};
  const CodecSpec sparse_zstd{CodecKind::kTopK, 0.001, 1};
  auto has_sparsest = [&](const std::vector<CodecSpec>& v) {
    return std::find(v.begin(), v.end(), sparse) != v.end() ||
           std::find(v.begin(), v.end(), sparse_zstd) != v.end();
  };
  // Precondition: by the model alone it is not among the three fastest.
  std::vector<std::pair<double, std::string>> ranked;
  for (const CodecSpec& c : FastestCandidates(in, po, 0, 16)) {
    ranked.emplace_back(PredictBucketSeconds(in.buckets[0], c, in), c.ToString());
  }
  std::sort(ranked.begin(), ranked.end());
  REQUIRE(ranked.size() > 3);
  for (size_t i = 0; i < 3; ++i) REQUIRE(ranked[i].second.rfind("topk:0.001", 0) != 0);
  const std::vector<CodecSpec> trials = FastestCandidates(in, po, 0, 3);
  CHECK(trials.size() == 4);
  CHECK(has_sparsest(trials));
  // Timed, it wins the plan when it is the fastest measured.
  in.measured_s.assign(1, {});
  for (const CodecSpec& c : trials) {
    in.measured_s[0][c.ToString()] = c.density == 0.001 ? 0.173 : 0.243;
  }
  auto plan = PlanCodecs(in, po);
  REQUIRE(plan.ok());
  CHECK(plan->buckets[0].spec.density == 0.001);
  // With top-k off there is nothing sparse to add; count 0 asks for nothing.
  PlannerOptions dense_only;
  dense_only.allow_topk = false;
  CHECK_FALSE(has_sparsest(FastestCandidates(in, dense_only, 0, 3)));
  CHECK(FastestCandidates(in, po, 0, 0).empty());
}

TEST_CASE("codec calibration: plausible figures -- peers agree on identical speeds and plans") {
  CalibrationOptions co;
#ifdef RINGTRAIN_SANITIZED
  co.floats = size_t{1} << 16;
#else
  co.floats = size_t{1} << 20;
#endif
  rt::Stopwatch watch;
  CodecSpeeds s = CalibrateCodecs(co);
  MESSAGE("calibration of " << co.floats << " floats took " << watch.ElapsedMs() << " ms");
  MESSAGE("select " << s.select_bps / 1e9 << " GB/s, encode " << s.encode_eps / 1e6
                    << " M entries/s, decode+add " << s.decode_eps / 1e6 << " M entries/s, bf16 "
                    << s.bf16_bps / 1e9 << " GB/s, add " << s.add_bps / 1e9 << " GB/s, zstd "
                    << s.zstd_compress_bps / 1e9 << " / " << s.zstd_decompress_bps / 1e9
                    << " GB/s");
  for (const auto& p : s.profiles)
    MESSAGE("density " << p.density << ": " << p.raw_bytes_per_entry << " B/entry, zstd "
                       << p.zstd_bytes_per_entry << ", select " << p.select_bps / 1e9 << " GB/s");
  REQUIRE(s.profiles.size() == co.densities.size());
  for (double v : {s.select_bps, s.encode_eps, s.decode_eps, s.bf16_bps, s.add_bps,
                   s.zstd_compress_bps, s.zstd_decompress_bps}) {
    CHECK(std::isfinite(v));
    // Wall-clock rates: a sanitized build on a loaded machine (ctest -j2 beside other
    // jobs) measured 0.9 M/s, so only "clearly running" is asserted.
    CHECK(v > 1e4);
  }
  for (size_t i = 0; i < s.profiles.size(); ++i) {
    const auto& p = s.profiles[i];
    CHECK(p.raw_bytes_per_entry >= 2.0);  // a bf16 value plus some index bits
    CHECK(p.raw_bytes_per_entry < 8.0);
    CHECK(p.zstd_bytes_per_entry <= p.raw_bytes_per_entry);
    if (i > 0) CHECK(p.raw_bytes_per_entry >= s.profiles[i - 1].raw_bytes_per_entry);  // sparser
  }

  // Three peers with different local figures agree on the same (slowest) figures.
  const int n = 3;
  std::vector<CodecSpeeds> agreed(n);
  auto statuses = rt::collective::testing::RunOnRing(n, [&](rt::net::RingTransport* ring) {
    CodecSpeeds mine = s;
    mine.select_bps *= 1.0 + 0.1 * ring->rank();
    mine.profiles[2].zstd_bytes_per_entry += 0.01 * ring->rank();
    auto r = AgreeCodecSpeeds(*ring, mine);
    if (!r.ok()) return r.status();
    agreed[ring->rank()] = *r;
    return absl::OkStatus();
  });
  for (const auto& st : statuses) CHECK(st.ok());
  auto in = Inputs(n, 12.5e6, 1.0);
  std::vector<CodecPlan> plans;
  for (int p = 0; p < n; ++p) {
    CHECK(agreed[p].select_bps == s.select_bps);
    CHECK(agreed[p].profiles[2].zstd_bytes_per_entry == s.profiles[2].zstd_bytes_per_entry + 0.02);
    in.speeds = agreed[p];
    auto plan = PlanCodecs(in, PlannerOptions{});
    REQUIRE(plan.ok());
    plans.push_back(*plan);
  }
  CHECK(SamePlan(plans[0], plans[1]));
  CHECK(SamePlan(plans[0], plans[2]));

  // A peer with another ladder is refused with a message.
  auto mismatch = rt::collective::testing::RunOnRing(2, [&](rt::net::RingTransport* ring) {
    CodecSpeeds mine = s;
    if (ring->rank() == 1) mine.profiles.pop_back();
    return AgreeCodecSpeeds(*ring, mine).status();
  });
  CHECK_FALSE(mismatch[0].ok());
  CHECK_FALSE(mismatch[1].ok());
}
