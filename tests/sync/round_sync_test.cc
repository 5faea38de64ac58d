// RoundSync's outer step and schedule (sync/round_sync.h): the Nesterov formula against
// a double-precision reference, outer lr 1 without momentum as exact parameter
// averaging (also for values that cross zero), the lossy path's pseudo-gradients, and
// the round boundaries; with overlap, the one-round-delayed outer step of two peers
// against a double-precision reference of the scheme, a drained round end computing the
// same bits as applying then contributing, one peer with outer lr 1 keeping its bits,
// and a replaced state (a joiner, or a peer that was behind) going back to the shared
// copy with the pending round kept; sharded, the outer step on pieces gives the whole
// step's bits there with the momentum staged until the commit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sync/round_sync.h"

namespace {

using rt::sync::RoundSync;
using rt::sync::RoundSyncOptions;

RoundSyncOptions Options(float lr, float mu, const char* codec, bool overlap = false) {
  RoundSyncOptions o;
  o.overlap = overlap;
  o.every = 5;
  o.outer_lr = lr;
  o.outer_momentum = mu;
  o.codec = *rt::collective::ParseCodecSpec(codec);
  return o;
}

}  // namespace

TEST_CASE("outer lr 1, momentum 0, one peer: the next round starts from the local bits") {
  // Values that cross zero and differ from the round start by far more than a factor 2,
  // where start - (start - local) is not local in fp32.
  const std::vector<float> start = {1.0f, -3e-8f, 0.1f, 1e-3f, -2.5f, 7.0f, 0.0f, -0.0f};
  const std::vector<float> local = {1.0000001f, 2e-9f, -0.3f, 1.7e-3f, 3.25f, 7.0f, -0.0f, 1e-30f};
  bool sterbenz_fails = false;
  for (size_t i = 0; i < start.size(); ++i) {
    sterbenz_fails |= start[i] - (start[i] - local[i]) != local[i];
  }
  CHECK(sterbenz_fails);  // the naive formulation would not be exact here
  RoundSync r(Options(1.0f, 0.0f, "none"), start.size());
  r.BeginRound(start);
  std::vector<float> params = local, sum(start.size());
  r.Contribution(params, RoundSync::Weight(40, 40), absl::MakeSpan(sum));
  r.Apply(sum, absl::MakeSpan(params));
  for (size_t i = 0; i < start.size(); ++i) {
    CHECK(std::signbit(params[i]) == std::signbit(local[i]));
    CHECK(params[i] == local[i]);
    CHECK(r.start()[i] == local[i]);
  }
}

TEST_CASE("the outer Nesterov step matches a double reference over three rounds") {
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const size_t n = 257;
  for (const char* codec : {"none", "bf16"}) {
    INFO(codec);
    RoundSync r(Options(0.7f, 0.9f, codec), n);
    std::vector<float> params(n);
    for (float& p : params) p = d(gen);
    r.BeginRound(params);
    std::vector<double> ref_start(params.begin(), params.end()), ref_buf(n, 0.0);
    for (int round = 0; round < 3; ++round) {
      // Two peers' locals (weights 0.25 and 0.75), summed as a ring would.
      std::vector<float> a(n), b(n), ca(n), cb(n), sum(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = params[i] + 0.01f * d(gen);
        b[i] = params[i] + 0.01f * d(gen);
      }
      r.Contribution(a, 0.25f, absl::MakeSpan(ca));
      r.Contribution(b, 0.75f, absl::MakeSpan(cb));
      for (size_t i = 0; i < n; ++i) sum[i] = ca[i] + cb[i];
      const double norm = r.Apply(sum, absl::MakeSpan(params)).pseudo_grad_norm;
      double ref_norm = 0;
      for (size_t i = 0; i < n; ++i) {
        const double delta = ref_start[i] - (0.25 * a[i] + 0.75 * b[i]);
        ref_norm += delta * delta;
        ref_buf[i] = 0.9 * ref_buf[i] + delta;
        ref_start[i] -= 0.7 * (delta + 0.9 * ref_buf[i]);
        CHECK(params[i] == doctest::Approx(ref_start[i]).epsilon(1e-5));
        CHECK(r.momentum()[i] == doctest::Approx(ref_buf[i]).epsilon(1e-3).scale(1e-4));
        CHECK(r.start()[i] == params[i]);
        ref_start[i] = params[i];  // continue from the fp32 state (errors do not compound)
      }
      CHECK(norm == doctest::Approx(std::sqrt(ref_norm)).epsilon(1e-4));
    }
  }
}

TEST_CASE("overlap: two peers' delayed outer steps match a double reference of the scheme") {
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const size_t n = 129;
  for (const char* codec : {"none", "int8"}) {
    INFO(codec);
    // Each peer has its own RoundSync; the "ring" sums their contributions in order.
    RoundSync r0(Options(0.7f, 0.9f, codec, true), n), r1(Options(0.7f, 0.9f, codec, true), n);
    std::vector<float> g0(n);
    for (float& v : g0) v = d(gen);
    std::vector<float> x0 = g0, x1 = g0;
    r0.BeginRound(g0);
    r1.BeginRound(g0);
    std::vector<double> G(g0.begin(), g0.end()), buf(n, 0.0), X0(G), X1(G), A0(n), A1(n);
    const float w0 = 0.25f, w1 = 0.75f;
    for (int round = 0; round < 4; ++round) {
      for (size_t i = 0; i < n; ++i) {  // the inner steps: each peer's own progress
        const float s0 = 0.01f * d(gen), s1 = 0.01f * d(gen);
        x0[i] += s0;
        x1[i] += s1;
        X0[i] += s0;
        X1[i] += s1;
      }
      if (r0.has_pending()) {
        std::vector<float> sum(n);
        for (size_t i = 0; i < n; ++i) sum[i] = r0.exchange()[i] + r1.exchange()[i];
        r0.ApplyDelayed(sum, absl::MakeSpan(x0));
        r1.ApplyDelayed(sum, absl::MakeSpan(x1));
        CHECK(!r0.has_pending());
        for (size_t i = 0; i < n; ++i) {
          const double delta = G[i] - (w0 * A0[i] + w1 * A1[i]);
          buf[i] = 0.9 * buf[i] + delta;
          const double g = G[i] - 0.7 * (delta + 0.9 * buf[i]);
          X0[i] += g - A0[i];
          X1[i] += g - A1[i];
          G[i] = g;
          // The shared state is the same bits on both peers; each replica carries its own
          // round on top of it.
          CHECK(r0.start()[i] == r1.start()[i]);
          CHECK(r0.momentum()[i] == r1.momentum()[i]);
          CHECK(r0.start()[i] == doctest::Approx(g).epsilon(1e-4).scale(1e-3));
          CHECK(x0[i] == doctest::Approx(X0[i]).epsilon(1e-4).scale(1e-3));
          CHECK(x1[i] == doctest::Approx(X1[i]).epsilon(1e-4).scale(1e-3));
          // Continue from the fp32 state (errors do not compound).
          G[i] = r0.start()[i];
          buf[i] = r0.momentum()[i];
          X0[i] = x0[i];
          X1[i] = x1[i];
        }
      }
      r0.AddTokens(25);
      r1.AddTokens(75);
      r0.Launch(x0);
      r1.Launch(x1);
      CHECK(r0.pending_tokens() == 25);
      CHECK(r0.round_tokens() == 0);
      r0.Recontribute(w0);
      r1.Recontribute(w1);
      A0.assign(x0.begin(), x0.end());
      A1.assign(x1.begin(), x1.end());
    }
    CHECK(x0 != x1);  // the replicas differ by design
  }
}

TEST_CASE("overlap: a drained round end computes the bits of applying, then contributing") {
  std::mt19937 gen(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const size_t n = 100;
  for (const char* codec : {"none", "bf16"}) {
    INFO(codec);
    RoundSync a(Options(0.7f, 0.9f, codec, true), n), b(Options(0.7f, 0.9f, codec, true), n);
    std::vector<float> x(n), sum(n);
    for (float& v : x) v = d(gen);
    a.BeginRound(x);
    b.BeginRound(x);
    for (float& v : x) v += 0.01f * d(gen);
    a.Launch(x);
    b.Launch(x);
    for (size_t i = 0; i < n; ++i) {
      x[i] += 0.01f * d(gen);
      sum[i] = codec[0] == 'n' ? x[i] - 0.02f : 0.02f;  // some other peers' sum
    }
    std::vector<float> drained(n), applied(n), xa = x;
    a.DrainContribution(sum, x, 0.5f, absl::MakeSpan(drained));
    b.ApplyDelayed(sum, absl::MakeSpan(xa));
    b.Contribution(xa, 0.5f, absl::MakeSpan(applied));
    CHECK(drained == applied);
    CHECK(!b.has_pending());
    CHECK(a.has_pending());  // DrainContribution changes nothing
  }
}

TEST_CASE("overlap, one peer, outer lr 1, momentum 0, codec none: the replica keeps its bits") {
  std::mt19937 gen(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const size_t n = 64;
  RoundSync r(Options(1.0f, 0.0f, "none", true), n);
  std::vector<float> x(n);
  for (float& v : x) v = d(gen);
  r.BeginRound(x);
  for (float& v : x) v *= -3.0f;  // far from the start: crosses zero
  r.Launch(x);
  r.Recontribute(1.0f);
  const std::vector<float> launched = x;
  for (float& v : x) v += 0.5f * d(gen);  // the next round's progress
  const std::vector<float> before = x;
  std::vector<float> sum(r.exchange().begin(), r.exchange().end());  // the ring of one
  r.ApplyDelayed(sum, absl::MakeSpan(x));
  CHECK(x == before);
  CHECK(std::vector<float>(r.start().begin(), r.start().end()) == launched);
}

TEST_CASE("overlap: a replaced state goes back to the shared copy and keeps the pending round") {
  const size_t n = 8;
  std::vector<float> g(n), mine(n), theirs(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = 0.25f * static_cast<float>(i) - 1.0f;  // G, the shared copy
    mine[i] = g[i] + 0.5f;                        // this peer's round of progress
    theirs[i] = g[i] - 0.75f;                     // the serving peer's replica
  }
  for (const bool at_round_start : {true, false}) {
    INFO("at a round's start: " << at_round_start);
    RoundSync r(Options(0.7f, 0.9f, "int8", true), n);
    r.BeginRound(g);
    r.AddTokens(40);
    r.Launch(mine);  // a round's end: its exchange pending, 40 tokens of this peer in it
    REQUIRE(r.has_pending());
    REQUIRE(r.pending_tokens() == 40);
    r.AddTokens(8);
    // What the ring's state transfer does: start, anchor and the pending flag are
    // overwritten with the serving peer's (here: the same G, its own anchor, pending).
    r.ForgetRound();
    std::copy(theirs.begin(), theirs.end(), r.anchor().begin());
    std::vector<float> params = theirs;
    r.AfterReplacedState(at_round_start, absl::MakeSpan(params));
    CHECK(params == g);  // not the serving peer's replica: its round is that peer's
    CHECK(std::vector<float>(r.anchor().begin(), r.anchor().end()) == g);
    CHECK(std::vector<float>(r.start().begin(), r.start().end()) == g);
    CHECK(r.has_pending());  // the redo needs every peer of the ring, with weight 0
    CHECK(r.pending_tokens() == 0);
    CHECK(r.round_tokens() == 0);
    CHECK(r.sitting_out() == !at_round_start);
    // The redo's outer step: the replica lands on the new shared copy.
    std::vector<float> sum(n, 0.125f);
    r.ApplyDelayed(sum, absl::MakeSpan(params));
    CHECK(!r.has_pending());
    for (size_t i = 0; i < n; ++i) CHECK(params[i] == doctest::Approx(r.start()[i]).epsilon(1e-6));
    r.Launch(params);
    CHECK(!r.sitting_out());  // the next round is trained again
  }
  // Without a pending round (a drained round's end) the received parameters are G.
  RoundSync r(Options(0.7f, 0.9f, "int8", true), n);
  r.BeginRound(g);
  r.ForgetRound();
  std::vector<float> params = theirs;
  r.AfterReplacedState(true, absl::MakeSpan(params));
  CHECK(params == theirs);
  CHECK(std::vector<float>(r.start().begin(), r.start().end()) == theirs);
  CHECK(!r.sitting_out());
}

TEST_CASE("weights: token shares, exactly 1 alone, 0 without tokens") {
  CHECK(RoundSync::Weight(7, 7) == 1.0f);
  CHECK(RoundSync::Weight(0, 0) == 0.0f);
  CHECK(RoundSync::Weight(1, 4) == 0.25f);
}

TEST_CASE("round ends every H steps and at the run's last step, due intervals inside a round") {
  CHECK(rt::sync::IsRoundEnd(5, 12, 5));
  CHECK(!rt::sync::IsRoundEnd(6, 12, 5));
  CHECK(rt::sync::IsRoundEnd(12, 12, 5));
  CHECK(rt::sync::DueInRound(5, 10, 7));  // 7 lies in (5, 10]
  CHECK(!rt::sync::DueInRound(7, 10, 7));
  CHECK(rt::sync::DueInRound(0, 5, 5));
  CHECK(!rt::sync::DueInRound(0, 5, 0));
}

TEST_CASE("options are validated with the flag's name") {
  RoundSyncOptions o = Options(0.7f, 0.9f, "none");
  CHECK(o.Validate().ok());
  o.every = -1;
  CHECK(std::string(o.Validate().message()).find("--outer-every") != std::string::npos);
  o = Options(0.0f, 0.9f, "none");
  CHECK(std::string(o.Validate().message()).find("--outer-lr") != std::string::npos);
  o = Options(0.7f, 1.0f, "none");
  CHECK(std::string(o.Validate().message()).find("--outer-momentum") != std::string::npos);
}

TEST_CASE("--outer-after: validated, and part of the settings every peer must agree on") {
  RoundSyncOptions o = Options(0.7f, 0.9f, "int8");
  o.after = 150;
  CHECK(o.Validate().ok());
  // ToString is the ring's settings check ("outer" in the fingerprint): a peer with
  // another switch step is refused, one without it too.
  CHECK(o.ToString().find("after=150") != std::string::npos);
  RoundSyncOptions other = o;
  other.after = 151;
  CHECK(other.ToString() != o.ToString());
  other.after = 0;
  CHECK(other.ToString() != o.ToString());
  CHECK(other.ToString().find("after") == std::string::npos);  // today's string unchanged
  o.after = -1;
  CHECK(std::string(o.Validate().message()).find("--outer-after must be >= 0") !=
        std::string::npos);
  o = Options(0.7f, 0.9f, "none");
  o.every = 0;
  o.after = 10;
  CHECK(std::string(o.Validate().message()).find("give --outer-every H > 0") != std::string::npos);
}

TEST_CASE("--inner-lr-scale: validated, and part of the settings every peer must agree on") {
  RoundSyncOptions o = Options(1.0f, 0.5f, "int8");
  o.inner_lr_scale = 2.0f;
  CHECK(o.Validate().ok());
  CHECK(o.ToString().find("inner_lr_scale=2") != std::string::npos);
  RoundSyncOptions other = o;
  other.inner_lr_scale = 1.0f;
  CHECK(other.ToString() != o.ToString());
  CHECK(other.ToString().find("inner_lr_scale") == std::string::npos);  // today's string
  for (float bad : {0.0f, -1.0f, 10.5f, std::nanf("")}) {
    o.inner_lr_scale = bad;
    INFO("scale ", bad);
    CHECK(std::string(o.Validate().message()).find("--inner-lr-scale must be in (0, 10]") !=
          std::string::npos);
  }
  o = Options(1.0f, 0.5f, "none");
  o.every = 0;
  o.inner_lr_scale = 1.5f;
  CHECK(std::string(o.Validate().message()).find("give --outer-every H > 0") != std::string::npos);
  o.inner_lr_scale = 1.0f;
  CHECK(o.Validate().ok());  // per-step sync with the default: nothing to refuse
}

TEST_CASE("Restart: round sync begins at the given parameters with the momentum zero") {
  const size_t n = 64;
  RoundSync r(Options(0.7f, 0.9f, "none"), n);
  std::vector<float> params(n, 1.0f);
  r.BeginRound(params);
  // One round that moves the parameters, so the momentum is not zero.
  std::vector<float> local(n, 0.5f), sum(n);
  r.AddTokens(10);
  r.Contribution(local, 1.0f, absl::MakeSpan(sum));
  (void)r.Apply(sum, absl::MakeSpan(params));
  REQUIRE(std::any_of(r.momentum().begin(), r.momentum().end(), [](float m) { return m != 0; }));
  r.ForgetRound();
  std::vector<float> at_switch(n, 2.0f);
  r.Restart(at_switch);
  CHECK(std::all_of(r.momentum().begin(), r.momentum().end(), [](float m) { return m == 0; }));
  CHECK(std::equal(at_switch.begin(), at_switch.end(), r.start().begin()));
  CHECK(!r.replaced());
  CHECK(r.round_tokens() == 0);
  CHECK(!r.has_pending());
}

TEST_CASE("sharded: the outer step on pieces is the whole step's bits there, momentum staged") {
  // Two rounds of the whole RoundSync against one holding pieces [2, 5) and [9, 12) of
  // 12 floats: each round the pieces get the exact values of the whole step, the staged
  // momentum is the whole one there, and start and momentum stay as they were until the
  // commit (so a step whose allgather broke can be dropped).
  const size_t n = 12;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> params(n);
  for (float& x : params) x = dist(rng);
  RoundSyncOptions o = Options(0.7f, 0.9f, "none");
  RoundSync whole(o, n);
  o.shard = true;
  RoundSync sharded(o, n);
  CHECK(sharded.held_floats() == 0);  // nothing before the pieces are known
  const std::vector<rt::sync::FloatRange> pieces = {{2, 5}, {9, 12}};
  rt::AlignedBuffer<float> start(6), momentum(6);
  momentum.Zero();
  sharded.SetPieces(pieces, std::move(start), std::move(momentum));
  whole.BeginRound(params);
  sharded.BeginRound(params);
  CHECK(rt::sync::PackedOffset(pieces, 3) == 1);
  CHECK(rt::sync::PackedOffset(pieces, 10) == 4);
  CHECK(rt::sync::PackedOffset(pieces, 6) == -1);
  for (int round = 0; round < 2; ++round) {
    std::vector<float> sum(n), whole_params = params;
    for (float& x : sum) x = dist(rng);
    whole.Apply(sum, absl::MakeSpan(whole_params));
    std::vector<float> staged_sum = sum;
    rt::AlignedBuffer<float> staged(sharded.held_floats());
    const std::vector<float> momentum_before(sharded.momentum().begin(), sharded.momentum().end());
    const double norm_sq =
        sharded.StageOuterStep(absl::MakeSpan(staged_sum), staged.span(), {{2, 5}});
    CHECK(norm_sq > 0);
    CHECK(std::equal(momentum_before.begin(), momentum_before.end(), sharded.momentum().begin()));
    size_t k = 0;
    for (const auto& [b, e] : pieces) {
      for (size_t i = b; i < e; ++i, ++k) {
        CHECK(staged_sum[i] == whole_params[i]);  // bit for bit (no NaN here)
        CHECK(staged.data()[k] == whole.momentum()[i]);
      }
    }
    // The allgather would bring every other coordinate: take the whole step's.
    sharded.CommitOuterStep(&staged, whole_params);
    k = 0;
    for (const auto& [b, e] : pieces) {
      for (size_t i = b; i < e; ++i, ++k) {
        CHECK(sharded.momentum()[k] == whole.momentum()[i]);
        CHECK(sharded.start()[k] == whole.start()[i]);
      }
    }
    params = whole_params;
  }
}
