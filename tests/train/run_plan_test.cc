// PlanRun: memory matches what Gpt really allocates; batch search, codec ladder and
// recommendations behave as the arithmetic says; an unequal fleet (--gflops per peer) is
// split as load balancing splits it, and the --gflops list is parsed strictly; --zero 1
// holds and sends what run_plan.h says, on every ring size, and refuses what train refuses.
#include "train/run_plan.h"

#include "bf16_paths.h"
#include "collective/bucketed_reducer.h"
#include "model/param_layout.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

rt::train::RunPlanInputs Tiny() {
  rt::train::RunPlanInputs in;
  in.config = {/*vocab_size=*/256, /*n_layers=*/2, /*n_heads=*/2, /*dim=*/32, /*seq_len=*/16};
  in.options.max_batch = 3;
  return in;
}

// GPT-2 124M (seq_len 256, batch 4) on 4 peers of 100 GFLOP/s each; links are the test's.
rt::train::RunPlanInputs Gpt2On4Peers() {
  rt::train::RunPlanInputs in = Tiny();
  in.config = {50304, 12, 12, 768, 256};
  in.options.max_batch = 4;
  in.peers = 4;
  in.gflops = {100};
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
      // The estimate is for planning other machines: it exists even where this one
      // cannot run the precision (bf16 without a oneDNN bf16 matmul, AVX2 and below).
      auto estimate = rt::model::Gpt::EstimateActivationBytes(c, o);
      REQUIRE(estimate.ok());
      CHECK(*estimate > 0);
      if (precision == rt::model::Precision::kBf16 && !rt::testing::Bf16MatmulsRun()) {
        REQUIRE_FALSE(gpt.ok());
        rt::testing::CheckBf16Refusal(gpt.status());
        continue;
      }
      REQUIRE(gpt.ok());
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
  rt::train::RunPlanInputs in = Gpt2On4Peers();
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

TEST_CASE("plan --zero 0 and 1: memory per peer is the formula of run_plan.h at N = 1, 3, 4, 8") {
  for (const char* compress : {"none", "bf16"}) {
    for (int peers : {1, 3, 4, 8}) {
      for (int zero : {0, 1}) {
        CAPTURE(compress);
        CAPTURE(peers);
        CAPTURE(zero);
        rt::train::RunPlanInputs in = Tiny();
        in.options.precision = rt::model::Precision::kBf16;
        in.compress = compress;
        in.peers = peers;
        in.zero = zero;
        auto p = rt::train::PlanRun(in);
        REQUIRE(p.ok());
        const double P = static_cast<double>(rt::model::ParamLayout(in.config).total_floats());
        REQUIRE(p->n_params == rt::model::ParamLayout(in.config).total_floats());
        const bool sharded = zero == 1 && peers >= 2;
        const double N = peers;
        CHECK(p->sharded == sharded);
        CHECK(p->params == 4 * P);
        CHECK(p->grads == 4 * P);
        CHECK(p->adam == (sharded ? 8 * P / N : 8 * P));
        CHECK(p->adam_replica == (sharded ? 8 * P / N : 0));
        CHECK(p->commit_staging == (sharded ? 4 * 2 * P / N : 0));
        CHECK(p->bf16_weights == 2 * P);
        CHECK(p->residual == (std::string(compress) == "bf16" ? 4 * P : 0));
        CHECK(p->reserve == in.reserve_bytes);
        // Moments, replica and staging: 24/N bytes per parameter against 8.
        const double optimizer = sharded ? 24 * P / N : 8 * P;
        const double total =
            4 * P + 4 * P + optimizer + 2 * P + p->residual + p->activations + in.reserve_bytes;
        CHECK(p->total == doctest::Approx(total).epsilon(1e-12));
        // On one peer --zero 1 is --zero 0.
        if (peers == 1 && zero == 1) {
          in.zero = 0;
          auto plain = rt::train::PlanRun(in);
          REQUIRE(plain.ok());
          CHECK(p->total == plain->total);
          CHECK(p->max_batch_that_fits == plain->max_batch_that_fits);
        }
      }
    }
  }
}

TEST_CASE(
    "plan --zero 1 sends a reduce-scatter during backward, fp32 parameters and the replica after "
    "it") {
  for (int peers : {1, 3, 4, 8}) {
    CAPTURE(peers);
    rt::train::RunPlanInputs in = Tiny();
    in.peers = peers;
    in.link_bps = 1e6;
    in.rtt_s = 1e-3;
    in.zero = 1;
    auto z1 = rt::train::PlanRun(in);
    in.zero = 0;
    auto z0 = rt::train::PlanRun(in);
    REQUIRE(z1.ok());
    REQUIRE(z0.ok());
    const double P = static_cast<double>(z1->n_params), N = peers;
    // Zero 1: the dense codecs only.
    REQUIRE(z1->codecs.size() == 2);
    CHECK(z1->codecs[0].codec == "none");
    CHECK(z1->codecs[1].codec == "bf16");
    const double after = peers == 1 ? 0 : (N - 1) / N * 4 * P + 4 * P / N;
    for (int i = 0; i < 2; ++i) {
      const double bytes_per = i == 0 ? 4 : 2;
      const rt::train::CodecEstimate& e1 = z1->codecs[i];
      const rt::train::CodecEstimate& e0 = z0->codecs[i];
      CAPTURE(e1.codec);
      const double rs = peers == 1 ? 0 : (N - 1) / N * bytes_per * P;
      CHECK(e1.backward_bytes == doctest::Approx(rs));
      CHECK(e1.wire_bytes == doctest::Approx(rs + after));
      // Reduce-scatter N-1 hops; allgather N-1 and the replica forward 1 after the update.
      const double rs_s = peers == 1 ? 0 : rs / in.link_bps + (N - 1) * in.rtt_s;
      const double after_s = peers == 1 ? 0 : after / in.link_bps + N * in.rtt_s;
      CHECK(e1.backward_seconds == doctest::Approx(rs_s));
      CHECK(e1.seconds == doctest::Approx(rs_s + after_s));
      // Zero 0: the allreduce, all of it during backward.
      const double ar = peers == 1 ? 0 : 2 * (N - 1) / N * bytes_per * P;
      CHECK(e0.codec == e1.codec);
      CHECK(e0.wire_bytes == doctest::Approx(ar));
      CHECK(e0.backward_bytes == e0.wire_bytes);
      CHECK(e0.backward_seconds == e0.seconds);
      CHECK(e0.seconds ==
            doctest::Approx(peers == 1 ? 0 : ar / in.link_bps + 2 * (N - 1) * in.rtt_s));
    }
    // Dense fp32: the same bytes as the allreduce plus the replica forward.
    CHECK(z1->codecs[0].wire_bytes ==
          doctest::Approx(z0->codecs[0].wire_bytes + (peers == 1 ? 0 : 4 * P / N)));
  }
}

// The share of the parameters in the bucket backward finishes last (offset 0).
double LastBucketShare(const rt::train::RunPlanInputs& in) {
  const size_t n = rt::model::ParamLayout(in.config).total_floats();
  for (const auto& b : rt::collective::BucketedReducer::Cut(n, in.bucket_bytes)) {
    if (b.begin == 0) return static_cast<double>(b.end - b.begin) / static_cast<double>(n);
  }
  return 1.0;
}

TEST_CASE("plan: the bucket backward finishes last is never hidden -- --bucket-mb sets its size") {
  rt::train::RunPlanInputs in = Gpt2On4Peers();
  in.link_bps = 100e9 / 8;  // so fast that the whole exchange fits in backward
  for (size_t mb : {25, 100}) {
    CAPTURE(mb);
    in.bucket_bytes = mb << 20;
    auto p = rt::train::PlanRun(in);
    REQUIRE(p.ok());
    REQUIRE(p->recommended_codec == "none");
    const double during = p->codecs[0].backward_seconds;
    REQUIRE(during < p->backward_s);
    const double share = LastBucketShare(in);
    CHECK(share > 0.0);
    CHECK(share < 1.0);
    CHECK(p->balanced_step_s == doctest::Approx(p->compute_s + during * share));
  }
}

TEST_CASE("plan --zero 1: the step waits for the allgather -- the suggestion is none or bf16") {
  rt::train::RunPlanInputs in = Gpt2On4Peers();
  in.zero = 1;
  in.link_bps = 10e9 / 8;  // 10 Gbit/s: the fp32 reduce-scatter hides
  auto fast = rt::train::PlanRun(in);
  REQUIRE(fast.ok());
  CHECK(fast->recommended_codec == "none");
  const rt::train::CodecEstimate& none = fast->codecs[0];
  CHECK(none.hides);
  // Hidden behind backward, except the bucket backward finishes last.
  CHECK(fast->balanced_step_s ==
        doctest::Approx(fast->compute_s + none.backward_seconds * LastBucketShare(in) +
                        (none.seconds - none.backward_seconds)));
  in.link_bps = 100e6 / 8;  // 100 Mbit/s: nothing hides, bf16 is the fastest
  auto slow = rt::train::PlanRun(in);
  REQUIRE(slow.ok());
  CHECK(slow->recommended_codec == "bf16");
  const rt::train::CodecEstimate& bf16 = slow->codecs[1];
  CHECK_FALSE(bf16.hides);
  CHECK(slow->balanced_step_s ==
        doctest::Approx(slow->compute_s + (bf16.backward_seconds - slow->backward_s) +
                        (bf16.seconds - bf16.backward_seconds)));
}

TEST_CASE("plan --zero 1: fits is judged on the sharded total -- checkpoints add no memory") {
  // The writers build a --zero 1 checkpoint from the pieces as they arrive
  // (ckpt::CheckpointBuilder): nothing but the peer's own state is in memory.
  rt::train::RunPlanInputs in = Tiny();
  in.peers = 4;
  in.zero = 1;
  in.reserve_bytes = 0;
  auto p = rt::train::PlanRun(in);
  REQUIRE(p.ok());
  in.ram_bytes = p->total;
  auto exact = rt::train::PlanRun(in);
  REQUIRE(exact.ok());
  CHECK(exact->fits);
  CHECK(exact->max_batch_that_fits == in.options.max_batch);
  in.ram_bytes = p->total * 0.999;
  auto tight = rt::train::PlanRun(in);
  REQUIRE(tight.ok());
  CHECK_FALSE(tight->fits);
  CHECK(tight->max_batch_that_fits < in.options.max_batch);
}

TEST_CASE("plan --zero takes 0 or 1, and --zero 1 refuses top-k and auto with the reason") {
  rt::train::RunPlanInputs in = Tiny();
  in.peers = 4;
  for (int bad : {2, -1}) {
    in.zero = bad;
    auto p = rt::train::PlanRun(in);
    REQUIRE_FALSE(p.ok());
    CHECK(std::string(p.status().message()) ==
          "--zero must be 0 (every peer holds all optimizer state) or 1 (sharded), got " +
              std::to_string(bad));
  }
  in.zero = 1;
  for (const char* sparse : {"topk:0.01", "auto"}) {
    CAPTURE(sparse);
    in.compress = sparse;
    auto p = rt::train::PlanRun(in);
    REQUIRE_FALSE(p.ok());
    const std::string why(p.status().message());
    CHECK(why.find(std::string("--zero 1 works with --compress none or bf16, not ") + sparse) == 0);
    CHECK(why.find("reduce-scatter cannot carry sparse sums") != std::string::npos);
    in.zero = 0;  // fine without sharding
    CHECK(rt::train::PlanRun(in).ok());
    in.zero = 1;
  }
  in.compress = "gzip";
  auto junk = rt::train::PlanRun(in);
  REQUIRE_FALSE(junk.ok());
  CHECK(std::string(junk.status().message()).find("--compress 'gzip'") != std::string::npos);
}

TEST_CASE("round sync: bytes per round by codec, tokens/s against compute only, outer memory") {
  // The 1B model on eight 400 GFLOP/s peers at 100 Mbit/s.
  rt::train::RunPlanInputs in;
  in.config = {32000, 20, 16, 2048, 1024};
  in.options.precision = rt::model::Precision::kBf16;
  in.options.recompute = true;
  in.options.max_batch = 1;
  in.peers = 8;
  in.gflops = {400};
  in.link_bps = 100e6 / 8;
  in.outer_every = 1000;
  in.outer_compress = "none";
  auto none = rt::train::PlanRun(in);
  REQUIRE(none.ok());
  const double n = static_cast<double>(none->n_params);
  CHECK(none->round.wire_bytes == doctest::Approx(2.0 * 7 / 8 * 4 * n));
  CHECK(none->round.outer_state_bytes == doctest::Approx(8 * n));
  CHECK(none->residual == 0);
  CHECK(none->round.tokens_per_s >= 0.95 * none->round.compute_only_tokens_per_s);
  CHECK(none->fits);  // 32 GB
  in.outer_every = 500;
  in.outer_compress = "int8";
  auto int8 = rt::train::PlanRun(in);
  REQUIRE(int8.ok());
  CHECK(int8->round.wire_bytes == doctest::Approx(2.0 * 7 / 8 * 1.0625 * n));
  CHECK(int8->residual == doctest::Approx(4 * n));
  CHECK(int8->round.round_s == doctest::Approx(int8->round.compute_s + int8->round.exchange_s));
  CHECK(int8->round.hidden_s == 0);
  // Overlap: the exchange (~150 s at int8) hides behind the next round's compute (H = 500
  // inner steps of ~17 s), and the anchor and exchange buffer add 8 bytes per parameter,
  // which puts the 1B model past a 32 GB peer.
  in.outer_overlap = true;
  auto over = rt::train::PlanRun(in);
  REQUIRE(over.ok());
  CHECK(over->round.overlap);
  CHECK(over->round.exchange_s < over->round.compute_s);
  CHECK(over->round.hidden_s == doctest::Approx(over->round.exchange_s));
  CHECK(over->round.round_s == doctest::Approx(over->round.compute_s));
  CHECK(over->round.tokens_per_s == doctest::Approx(over->round.compute_only_tokens_per_s));
  CHECK(over->round.outer_state_bytes == doctest::Approx(16 * n));
  CHECK(over->total == doctest::Approx(int8->total + 8 * n));
  CHECK_FALSE(over->fits);
  // An exchange longer than a round hides only a round's compute: the round takes the
  // exchange's time.
  in.outer_every = 5;  // ~89 s of compute against ~160 s of int8 exchange
  auto longer = rt::train::PlanRun(in);
  REQUIRE(longer.ok());
  REQUIRE(longer->round.exchange_s > longer->round.compute_s);
  CHECK(longer->round.hidden_s == doctest::Approx(longer->round.compute_s));
  CHECK(longer->round.round_s == doctest::Approx(longer->round.exchange_s));
  in.outer_overlap = false;
  in.outer_every = 500;
  in.zero = 1;
  CHECK(!rt::train::PlanRun(in).ok());
  in.zero = 0;
  in.compress = "bf16";
  CHECK(!rt::train::PlanRun(in).ok());
}

TEST_CASE("round sync --outer-shard on: 24n/N of outer state at the peak, +4n/N on the wire") {
  // The 1B model on eight peers (docs/round-sync.md): 8.6 GB of outer state whole,
  // 3.2 GB sharded (own and replica pieces of start and momentum, and the staged momentum).
  rt::train::RunPlanInputs in;
  in.config = {32000, 20, 16, 2048, 1024};
  in.options.precision = rt::model::Precision::kBf16;
  in.options.recompute = true;
  in.options.max_batch = 1;
  in.gflops = {400};
  in.link_bps = 100e6 / 8;
  in.outer_every = 1000;
  in.outer_compress = "none";
  for (int peers : {1, 3, 8}) {
    INFO(peers, " peers");
    in.peers = peers;
    in.outer_shard = false;
    auto whole = rt::train::PlanRun(in);
    in.outer_shard = true;
    auto sharded = rt::train::PlanRun(in);
    REQUIRE(whole.ok());
    REQUIRE(sharded.ok());
    const double n = static_cast<double>(whole->n_params);
    if (peers == 1) {  // nothing to shard: the same plan
      CHECK_FALSE(sharded->round.sharded);
      CHECK(sharded->total == doctest::Approx(whole->total));
      continue;
    }
    CHECK(sharded->round.sharded);
    CHECK(sharded->round.outer_state_bytes == doctest::Approx(24 * n / peers));
    CHECK(sharded->total == doctest::Approx(whole->total - 8 * n + 24 * n / peers));
    CHECK(sharded->round.wire_bytes == doctest::Approx(whole->round.wire_bytes + 4 * n / peers));
  }
  CHECK(in.peers == 8);
  auto sharded = rt::train::PlanRun(in);
  REQUIRE(sharded.ok());
  CHECK(sharded->total < 25e9);  // 30.2 GB whole
  // Only with codec none and overlap off.
  in.outer_overlap = true;
  CHECK(absl::IsInvalidArgument(rt::train::PlanRun(in).status()));
  in.outer_overlap = false;
  in.outer_compress = "bf16";
  CHECK(absl::IsInvalidArgument(rt::train::PlanRun(in).status()));
}

TEST_CASE("round sync: inner steps on balanced shares, and the run is priced at the round's rate") {
  // The 1B model on four peers at 100 Mbit/s, one of them half as fast.
  rt::train::RunPlanInputs in;
  in.config = {32000, 20, 16, 2048, 1024};
  in.options.precision = rt::model::Precision::kBf16;
  in.options.recompute = true;
  in.options.max_batch = 2;
  in.peers = 4;
  in.gflops = {400, 400, 400, 200};
  in.link_bps = 100e6 / 8;
  in.outer_every = 100;
  in.outer_compress = "int8";
  auto p = rt::train::PlanRun(in);
  REQUIRE(p.ok());
  REQUIRE(p->balanced_shares != p->equal_shares);
  // The round's compute is H steps of the slowest balanced share (train --balance on
  // sizes inner steps by speed), shorter than the equal split's.
  const double slot_s = static_cast<double>(in.config.seq_len) * p->flops_per_token / 400e9;
  double slowest = 0;
  for (size_t i = 0; i < p->balanced_shares.size(); ++i) {
    slowest = std::max(slowest, p->balanced_shares[i] * slot_s * (i == 3 ? 2 : 1));
  }
  CHECK(p->round.compute_s == doctest::Approx(in.outer_every * slowest));
  CHECK(p->round.compute_s < in.outer_every * 2 * slot_s * 2);  // equal: 2 slots at half speed
  // --train-tokens: round sync's rate (the exchange of a round without overlap adds to
  // it), not the per-step row's.
  CHECK(rt::train::RunTokensPerSecond(*p) == p->round.tokens_per_s);
  CHECK(p->round.tokens_per_s < p->round.compute_only_tokens_per_s);
  CHECK(p->round.tokens_per_s != p->balanced_tokens_per_s);
  in.outer_every = 0;
  in.outer_compress = "none";
  auto per_step = rt::train::PlanRun(in);
  REQUIRE(per_step.ok());
  CHECK(rt::train::RunTokensPerSecond(*per_step) == per_step->balanced_tokens_per_s);
}
