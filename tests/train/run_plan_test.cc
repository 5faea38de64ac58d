// PlanRun: memory matches what Gpt really allocates; batch search, codec ladder and
// recommendations behave as the arithmetic says; an unequal fleet (--gflops per peer) is
// split as load balancing splits it, and the --gflops list is parsed strictly.
#include "train/run_plan.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

rt::train::RunPlanInputs Tiny() {
  rt::train::RunPlanInputs in;
  in.config = {/*vocab_size=*/256, /*n_layers=*/2, /*n_heads=*/2, /*dim=*/32, /*seq_len=*/16};
  in.options.max_batch = 3;
  return in;
}

}  // namespace

TEST_CASE("activation estimate equals what Gpt::Create allocates") {
  for (auto precision : {rt::model::Precision::kFp32, rt::model::Precision::kBf16}) {
    for (bool recompute : {false, true}) {
      rt::model::GptOptions o;
      o.precision = precision;
      o.recompute = recompute;
      o.max_batch = 3;
      rt::model::GptConfig c = Tiny().config;
      auto gpt = rt::model::Gpt::Create(c, o);
      REQUIRE(gpt.ok());
      auto estimate = rt::model::Gpt::EstimateActivationBytes(c, o);
      REQUIRE(estimate.ok());
      CHECK(*estimate == (*gpt)->ActivationBytes());
    }
  }
}

TEST_CASE("memory adds up and the largest batch that fits is the boundary") {
  rt::train::RunPlanInputs in = Tiny();
  in.reserve_bytes = 0;
  auto p = rt::train::PlanRun(in);
  REQUIRE(p.ok());
  const double n = static_cast<double>(p->n_params);
  CHECK(p->params == 4 * n);
  CHECK(p->adam == 8 * n);
  CHECK(p->total == doctest::Approx(16 * n + p->activations));
  // Give exactly the memory of batch 5: 5 must fit and 6 must not.
  in.options.max_batch = 5;
  auto at5 = rt::train::PlanRun(in);
  REQUIRE(at5.ok());
  in.ram_bytes = at5->total;
  in.options.max_batch = 1;
  auto search = rt::train::PlanRun(in);
  REQUIRE(search.ok());
  CHECK(search->fits);
  CHECK(search->max_batch_that_fits == 5);
  in.ram_bytes = 1000;  // nothing fits
  auto none = rt::train::PlanRun(in);
  REQUIRE(none.ok());
  CHECK_FALSE(none->fits);
  CHECK(none->max_batch_that_fits == 0);
}

TEST_CASE("dense ring bytes are 2(N-1)/N of the buffer and top-k is cut where it stops paying") {
  rt::train::RunPlanInputs in = Tiny();
  in.peers = 4;
  auto p = rt::train::PlanRun(in);
  REQUIRE(p.ok());
  REQUIRE(p->codecs.size() >= 2);
  CHECK(p->codecs[0].codec == "none");
  CHECK(p->codecs[0].wire_bytes == doctest::Approx(2.0 * 3 / 4 * 4 * p->n_params));
  CHECK(p->codecs[1].wire_bytes == doctest::Approx(p->codecs[0].wire_bytes / 2));
  in.peers = 40;  // 40 * 0.1 >= 2: topk:0.1 must be absent, topk:0.03 present
  auto big = rt::train::PlanRun(in);
  REQUIRE(big.ok());
  bool has01 = false, has003 = false;
  for (const auto& e : big->codecs) {
    has01 = has01 || e.codec == "topk:0.1";
    has003 = has003 || e.codec == "topk:0.03";
  }
  CHECK_FALSE(has01);
  CHECK(has003);
}

TEST_CASE("the suggestion is the least lossy codec that hides behind backward") {
  rt::train::RunPlanInputs in = Tiny();
  in.config = {50304, 12, 12, 768, 256};  // GPT-2 124M
  in.options.max_batch = 4;
  in.peers = 4;
  in.gflops = {100};
  in.link_bps = 10e9 / 8;  // 10 Gbit/s: dense fits
  auto fast = rt::train::PlanRun(in);
  REQUIRE(fast.ok());
  CHECK(fast->recommended_codec == "none");
  in.link_bps = 100e6 / 8;  // 100 Mbit/s: only sparse can hide
  auto slow = rt::train::PlanRun(in);
  REQUIRE(slow.ok());
  CHECK(slow->recommended_codec.rfind("topk:", 0) == 0);
}

TEST_CASE("bad plans are refused with the reason") {
  rt::train::RunPlanInputs in = Tiny();
  in.config.n_heads = 3;  // 32 % 3 != 0
  auto p = rt::train::PlanRun(in);
  REQUIRE_FALSE(p.ok());
  CHECK(std::string(p.status().message()).find("divisible") != std::string::npos);
  in = Tiny();
  in.peers = 0;
  CHECK_FALSE(rt::train::PlanRun(in).ok());
}

TEST_CASE("--gflops takes one figure for every peer or one per peer") {
  using rt::train::ParsePeerGflops;
  CHECK(ParsePeerGflops("0", 4)->empty());
  CHECK(ParsePeerGflops("", 4)->empty());
  CHECK(*ParsePeerGflops("120", 4) == std::vector<double>{120});
  CHECK(*ParsePeerGflops("120,120,80,60", 4) == std::vector<double>{120, 120, 80, 60});
  CHECK(*ParsePeerGflops(" 120, 80.5 ", 2) == std::vector<double>{120, 80.5});

  auto count = ParsePeerGflops("120,80", 4);
  REQUIRE_FALSE(count.ok());
  CHECK(std::string(count.status().message()) ==
        "--gflops lists 2 figures for --peers 4: give one (every peer) or one per peer");
  for (const char* bad : {"fast", "120,,80", "-5", "120,0", "nan", "120;80"}) {
    auto r = ParsePeerGflops(bad, 2);
    REQUIRE_FALSE(r.ok());
    CHECK(std::string(r.status().message()).find("is not a positive GFLOP/s figure") !=
          std::string::npos);
  }
}

TEST_CASE("an unequal fleet is split by speed and balancing predicts the faster step") {
  rt::train::RunPlanInputs in = Tiny();
  in.options.max_batch = 4;
  in.peers = 4;
  in.gflops = {120, 120, 80, 60};
  in.link_bps = 1e15;  // communication ~0: the step is the slowest share's compute
  in.rtt_s = 0;
  auto p = rt::train::PlanRun(in);
  REQUIRE(p.ok());
  CHECK(p->peer_gflops == std::vector<double>{120, 120, 80, 60});
  CHECK(p->equal_shares == std::vector<int>{4, 4, 4, 4});
  // Seconds per slot 1 : 1 : 1.5 : 2 -> the best split of 16 slots ends at 6 units.
  CHECK(p->balanced_shares == std::vector<int>{6, 5, 3, 2});
  const double slot_s = in.config.seq_len * p->flops_per_token / 120e9;
  CHECK(p->equal_step_s == doctest::Approx(4 * 2 * slot_s));
  CHECK(p->balanced_step_s == doctest::Approx(6 * slot_s));
  CHECK(p->compute_s == doctest::Approx(6 * slot_s));
  CHECK(p->balanced_tokens_per_s == doctest::Approx(p->tokens_per_step / p->balanced_step_s));
  CHECK(p->balanced_tokens_per_s / p->equal_tokens_per_s == doctest::Approx(8.0 / 6.0));

  // A peer more than --max-skew times slower than the fastest gets no slot.
  in.gflops = {100, 100, 100, 10};
  in.max_skew = 8;
  auto skewed = rt::train::PlanRun(in);
  REQUIRE(skewed.ok());
  CHECK(skewed->balanced_shares[3] == 0);
  in.max_skew = 20;
  CHECK(rt::train::PlanRun(in)->balanced_shares[3] >= 1);

  // Equal peers: one figure or the same figure per peer, and balancing changes nothing.
  in.gflops = {100};
  auto one = rt::train::PlanRun(in);
  in.gflops = {100, 100, 100, 100};
  auto each = rt::train::PlanRun(in);
  REQUIRE(one.ok());
  REQUIRE(each.ok());
  CHECK(one->balanced_shares == one->equal_shares);
  CHECK(one->balanced_step_s == doctest::Approx(one->equal_step_s));
  CHECK(one->compute_s == doctest::Approx(each->compute_s));

  in.gflops = {100, 100};  // two figures for four peers
  auto wrong = rt::train::PlanRun(in);
  REQUIRE_FALSE(wrong.ok());
  CHECK(std::string(wrong.status().message()).find("--peers is 4") != std::string::npos);
}
