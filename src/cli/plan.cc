// `ringtrain plan`: memory per peer and predicted step time for a model on N peers,
// before renting anything. Human table, then one JSON line. The arithmetic lives in
// src/train/run_plan.{h,cc}; this file parses flags and prints.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "train/run_cost.h"
#include "train/run_plan.h"
#include "train/sync_choice.h"

ABSL_FLAG(int, peers, 8, "plan: number of peers in the ring");
ABSL_FLAG(double, ram_gb, 32, "plan: RAM per peer, GB (1e9 bytes)");
ABSL_FLAG(double, reserve_gb, 1.5, "plan: RAM kept for the OS, page cache and process, GB");
ABSL_FLAG(std::string, gflops, "0",
          "plan: achieved GFLOP/s (from `ringtrain bench compute`): one figure for every peer "
          "(120) or one per peer (120,120,80,60: as many as --peers); 0 = no time estimate");
ABSL_DECLARE_FLAG(double, max_skew);  // train's (src/cli/train.cc): plan splits as train does
ABSL_FLAG(double, link_mbps, 1000, "plan: bottleneck link bandwidth of the ring, Mbit/s");
ABSL_FLAG(double, rtt_ms, 0.5, "plan: round-trip time per ring hop, ms");
// Not --tokens: abseil flags are global, and --tokens is sample's count of new tokens.
ABSL_FLAG(std::string, train_tokens, "",
          "plan: tokens the run trains on (2000000000, 2e9 or 2B): time, tokens per day and "
          "cost of the run (needs --gflops)");
ABSL_FLAG(double, price_per_hour, 0, "plan: price of one peer per hour (any currency)");
ABSL_FLAG(std::string, gpu_prices, "",
          "plan: file of GPU offers (NAME PRICE_PER_HOUR tflops=X|tokens_per_s=X per line, "
          "e.g. tools/gpu-prices.txt) to compare the run with renting GPUs");

namespace rt::cli {
namespace {

std::string Gb(double bytes) { return absl::StrFormat("%.2f GB", bytes / 1e9); }

// 2.0e9 -> "2.00B", 3.98e7 -> "39.8M": token counts as people say them.
std::string Count(double n) {
  if (n >= 1e12) return absl::StrFormat("%.2fT", n / 1e12);
  if (n >= 1e9) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1e6) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrFormat("%.0f", n);
}

// The step as `train` runs it: each peer's share of the global batch, split equally
// (--balance off) and by speed (--balance on), and the predicted step time of both.
void PrintStepTime(const train::RunPlan& p) {
  const size_t n = p.peer_gflops.size();
  bool equal_peers = true;
  for (double g : p.peer_gflops) equal_peers = equal_peers && g == p.peer_gflops[0];
  absl::PrintF("\nstep time (slowest share + communication not hidden, with auto's codec)\n");
  if (equal_peers) {
    absl::PrintF(
        "  %.3f s per step, %.0f tokens/s (%d peers at %.0f GFLOP/s: balancing changes "
        "nothing)\n",
        p.balanced_step_s, p.balanced_tokens_per_s, static_cast<int>(n), p.peer_gflops[0]);
    return;
  }
  absl::PrintF("  %-6s %9s %13s %16s\n", "peer", "GFLOP/s", "slots equal", "slots balanced");
  for (size_t i = 0; i < n; ++i) {
    absl::PrintF("  %-6d %9.1f %13d %16d\n", static_cast<int>(i), p.peer_gflops[i],
                 p.equal_shares[i], p.balanced_shares[i]);
  }
  absl::PrintF("  --balance off  %8.3f s per step  %10.0f tokens/s\n", p.equal_step_s,
               p.equal_tokens_per_s);
  absl::PrintF("  --balance on   %8.3f s per step  %10.0f tokens/s  (%.2fx)\n", p.balanced_step_s,
               p.balanced_tokens_per_s, p.balanced_tokens_per_s / p.equal_tokens_per_s);
}

// Without --outer-every: per-step sync (each codec, top-k's warm-up counted, the
// accumulation that would hide the exchange) against round sync on this link, and the
// suggestion (train/sync_choice.h). Returns the JSON fields (",...").
std::string PrintSyncComparison(const train::SyncComparison& c) {
  absl::PrintF("\nper-step sync against round sync on this link (compute only: %.0f tokens/s)\n",
               c.compute_only_tokens_per_s);
  absl::PrintF("  %-88s %8s %8s %18s  %s\n", "train flags", "tokens/s", "of comp.", "memory",
               "learns well");
  std::vector<std::string> rows;
  for (const train::SyncOption& o : c.options) {
    const std::string flags = o.note.empty() ? o.flags : absl::StrCat(o.flags, " (", o.note, ")");
    absl::PrintF("  %-88s %8.0f %7.1f%% %7.1f GB %-7s  %s\n", flags, o.tokens_per_s,
                 100 * o.of_compute, o.memory_bytes / 1e9, o.fits ? "fits" : "too big", o.learning);
    rows.push_back(absl::StrFormat(
        "{\"kind\":\"%s\",\"flags\":\"%s\",\"tokens_per_s\":%.1f,\"of_compute\":%.4f,"
        "\"memory_bytes\":%.0f,\"fits\":%s,\"learns_well\":%s}",
        o.kind, o.flags, o.tokens_per_s, o.of_compute, o.memory_bytes, o.fits ? "true" : "false",
        o.learns_well ? "true" : "false"));
  }
  std::string suggested;
  if (c.suggested >= 0) {
    const train::SyncOption& s = c.options[c.suggested];
    suggested = s.flags;
    absl::PrintF("  suggested: %s (%.0f tokens/s, %.1f%% of compute only)\n", s.flags,
                 s.tokens_per_s, 100 * s.of_compute);
  } else {
    absl::PrintF("  suggested: nothing that learns well fits in memory\n");
  }
  return absl::StrFormat(",\"sync_options\":[%s],\"suggested_sync\":\"%s\"",
                         absl::StrJoin(rows, ","), suggested);
}

// --train-tokens, --price-per-hour, --gpu-prices: what the planned run costs, and the same
// tokens on one rented GPU of each offer. Returns the JSON fields (",..." or "").
std::string PrintRunCost(const train::RunPlan& p, int peers, double tokens,
                         const std::vector<train::GpuOffer>& gpus, const std::string& gpu_file) {
  const double price = absl::GetFlag(FLAGS_price_per_hour);
  const double rate = train::RunTokensPerSecond(p);
  const train::RunCost run = train::PriceRun(tokens, rate, peers, price);
  absl::PrintF("\nrun of %s tokens at %.0f tokens/s (%s above)\n", Count(tokens), rate,
               p.round.every > 0 ? "the round sync rate" : "the balanced step");
  absl::PrintF("  time %.1f days (%.0f hours), %s tokens per day", run.seconds / 86400,
               run.seconds / 3600, Count(run.tokens_per_day));
  if (price > 0) absl::PrintF(", cost %d peers x %.3f/h = %.2f", peers, price, run.cost);
  absl::PrintF("\n");
  std::string json =
      absl::StrFormat(",\"train_tokens\":%.0f,\"run_seconds\":%.0f,\"run_cost\":%.2f", tokens,
                      run.seconds, run.cost);
  if (gpus.empty()) return json;
  absl::PrintF(
      "\nthe same tokens on one rented GPU (%s; assumes the model and its optimizer fit "
      "its memory)\n",
      gpu_file);
  absl::PrintF("  %-22s %9s %12s %10s %12s %s\n", "gpu", "price/h", "tokens/s", "days", "cost",
               "vs this ring");
  std::vector<std::string> entries;
  for (const train::GpuOffer& g : gpus) {
    const double tps = train::GpuTokensPerSecond(g, p.flops_per_token);
    const train::RunCost c = train::PriceRun(tokens, tps, 1, g.price_per_hour);
    std::string versus = "-";
    if (price > 0 && run.cost > 0) versus = absl::StrFormat("%.2fx the cost", c.cost / run.cost);
    absl::PrintF("  %-22s %9.3f %12.0f %10.1f %12.2f %s\n", g.name, g.price_per_hour, tps,
                 c.seconds / 86400, c.cost, versus);
    entries.push_back(absl::StrFormat(
        "{\"name\":\"%s\",\"price_per_hour\":%.4f,\"tokens_per_s\":%.1f,\"run_seconds\":%.0f,"
        "\"run_cost\":%.2f}",
        g.name, g.price_per_hour, tps, c.seconds, c.cost));
  }
  return json + ",\"gpus\":[" + absl::StrJoin(entries, ",") + "]";
}

int RunPlan(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain plan: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  train::RunPlanInputs in;
  in.config.n_layers = absl::GetFlag(FLAGS_layers);
  in.config.n_heads = absl::GetFlag(FLAGS_heads);
  in.config.dim = absl::GetFlag(FLAGS_dim);
  in.config.seq_len = absl::GetFlag(FLAGS_seq_len);
  in.config.vocab_size = absl::GetFlag(FLAGS_vocab);
  if (absl::Status s = ApplyArchFlags(&in.config); !s.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto precision = model::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n", std::string(precision.status().message()).c_str());
    return 2;
  }
  in.options.precision = *precision;
  in.options.recompute = absl::GetFlag(FLAGS_recompute);
  in.options.max_batch = absl::GetFlag(FLAGS_batch);
  in.accum = absl::GetFlag(FLAGS_accum);
  in.peers = absl::GetFlag(FLAGS_peers);
  in.ram_bytes = absl::GetFlag(FLAGS_ram_gb) * 1e9;
  in.reserve_bytes = absl::GetFlag(FLAGS_reserve_gb) * 1e9;
  absl::StatusOr<std::vector<double>> gflops =
      train::ParsePeerGflops(absl::GetFlag(FLAGS_gflops), in.peers);
  if (!gflops.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n", std::string(gflops.status().message()).c_str());
    return 2;
  }
  in.gflops = *gflops;
  in.max_skew = absl::GetFlag(FLAGS_max_skew);
  in.link_bps = absl::GetFlag(FLAGS_link_mbps) * 1e6 / 8;
  in.rtt_s = absl::GetFlag(FLAGS_rtt_ms) * 1e-3;
  in.compress = absl::GetFlag(FLAGS_compress);
  in.zero = absl::GetFlag(FLAGS_zero);
  const absl::StatusOr<size_t> bucket_bytes = BucketBytesFromFlag();
  if (!bucket_bytes.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n",
                 std::string(bucket_bytes.status().message()).c_str());
    return 2;
  }
  in.bucket_bytes = *bucket_bytes;
  // Round sync: the same checks and refusals as train's.
  const absl::StatusOr<sync::RoundSyncOptions> round = RoundSyncFromFlags();
  if (!round.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n", std::string(round.status().message()).c_str());
    return 2;
  }
  in.outer_every = round->every;
  in.outer_compress = round->codec.ToString();
  in.outer_overlap = round->overlap;
  in.outer_shard = round->shard;
  if (in.options.max_batch < 1) {
    std::fprintf(stderr, "ringtrain plan: --batch must be >= 1, got %d\n", in.options.max_batch);
    return 2;
  }
  // The run's price: checked before any output, so a mistake costs no scrolling.
  double train_tokens = 0;
  if (!absl::GetFlag(FLAGS_train_tokens).empty()) {
    absl::StatusOr<double> t = train::ParseTokenCount(absl::GetFlag(FLAGS_train_tokens));
    if (!t.ok()) {
      std::fprintf(stderr, "ringtrain plan: %s\n", std::string(t.status().message()).c_str());
      return 2;
    }
    train_tokens = *t;
  }
  const double price = absl::GetFlag(FLAGS_price_per_hour);
  if (!(price >= 0) || !std::isfinite(price)) {
    std::fprintf(stderr, "ringtrain plan: --price-per-hour must be a number >= 0, got %g\n", price);
    return 2;
  }
  std::vector<train::GpuOffer> gpus;
  const std::string gpu_file = absl::GetFlag(FLAGS_gpu_prices);
  if (!gpu_file.empty()) {
    std::ifstream f(gpu_file);
    if (!f) {
      std::fprintf(stderr, "ringtrain plan: cannot read --gpu-prices %s\n", gpu_file.c_str());
      return 2;
    }
    std::ostringstream text;
    text << f.rdbuf();
    absl::StatusOr<std::vector<train::GpuOffer>> parsed =
        train::ParseGpuPrices(text.str(), gpu_file);
    if (!parsed.ok()) {
      std::fprintf(stderr, "ringtrain plan: %s\n", std::string(parsed.status().message()).c_str());
      return 2;
    }
    gpus = *std::move(parsed);
  }
  if ((train_tokens > 0 || price > 0 || !gpus.empty()) &&
      (train_tokens <= 0 || in.gflops.empty())) {
    std::fprintf(stderr,
                 "ringtrain plan: --price-per-hour and --gpu-prices price a run: they need "
                 "--train-tokens N and --gflops G (from `ringtrain bench compute`)%s\n",
                 train_tokens > 0 ? "" : "; --train-tokens is missing");
    return 2;
  }
  auto plan_or = train::PlanRun(in);
  if (!plan_or.ok()) {
    std::fprintf(stderr, "ringtrain plan: %s\n", std::string(plan_or.status().message()).c_str());
    return 2;
  }
  const train::RunPlan& p = *plan_or;

  absl::PrintF("model     %s, %s, %s%s\n", in.config.ToString(),
               model::PrecisionName(in.options.precision),
               absl::StrFormat("%.1fM parameters", p.n_params / 1e6),
               in.options.recompute ? ", recompute" : "");
  absl::PrintF("step      %d peers x batch %d x accum %d x %d tokens = %lld tokens\n", in.peers,
               in.options.max_batch, in.accum, in.config.seq_len,
               static_cast<long long>(p.tokens_per_step));
  if (p.sharded) {
    absl::PrintF("\nmemory per peer (--zero 1: AdamW moments sharded over %d peers)\n", in.peers);
  } else {
    absl::PrintF("\nmemory per peer%s\n",
                 in.zero == 1 ? " (--zero 1 on one peer is --zero 0: nothing to shard)" : "");
  }
  auto line = [](const std::string& what, double bytes) {
    absl::PrintF("  %-25s%10s\n", what, Gb(bytes));
  };
  line("parameters (fp32)", p.params);
  line(p.sharded ? "gradients (fp32, full)" : "gradients (fp32)", p.grads);
  if (p.sharded) {
    line(absl::StrFormat("AdamW moments, own 1/%d", in.peers), p.adam);
    line("AdamW moments, replica", p.adam_replica);
    line("commit staging", p.commit_staging);
  } else {
    line("AdamW moments (fp32 x2)", p.adam);
  }
  if (p.bf16_weights > 0) line("bf16 weight copy", p.bf16_weights);
  if (p.residual > 0)
    line(in.outer_every > 0 ? "outer codec residual" : "codec residual", p.residual);
  if (p.round.outer_state_bytes > 0) {
    line(p.round.overlap   ? "outer state (+overlap)"
         : p.round.sharded ? absl::StrFormat("outer state, 2/%d+staging", in.peers)
                           : "outer state (start+mom.)",
         p.round.outer_state_bytes);
  }
  line(absl::StrFormat("activations (batch %d)", in.options.max_batch), p.activations);
  line("reserve (OS, cache)", p.reserve);
  absl::PrintF("  %-25s%10s of %s: %s\n", "total", Gb(p.total), Gb(in.ram_bytes),
               p.fits ? "fits" : "DOES NOT FIT");
  // What else would save memory: --recompute, and --zero 1 on a ring.
  std::vector<std::string> savers;
  if (!in.options.recompute) savers.push_back("--recompute");
  if (in.zero == 0 && in.peers >= 2 && in.outer_every == 0) savers.push_back("--zero 1");
  if (in.outer_every > 0 && p.residual > 0) savers.push_back("--outer-compress none");
  if (p.round.overlap) savers.push_back("--outer-overlap off");
  if (in.outer_every > 0 && in.peers >= 2 && !p.round.sharded && p.residual == 0) {
    savers.push_back("--outer-shard on");  // with --outer-overlap off
  }
  if (p.max_batch_that_fits == 0) {
    savers.push_back("a smaller model");
    const std::string last = savers.back();
    savers.pop_back();
    absl::PrintF("  even --batch 1 does not fit; try %s%s\n",
                 savers.empty() ? "" : absl::StrCat(absl::StrJoin(savers, ", "), " or "), last);
  } else {
    absl::PrintF("  largest --batch that fits: %d%s\n", p.max_batch_that_fits,
                 !p.fits && !savers.empty()
                     ? absl::StrCat(" (or add ", absl::StrJoin(savers, " or "), ")")
                     : "");
  }

  absl::PrintF("\ncommunication per step (ring of %d, %.0f Mbit/s, %.2f ms RTT)\n", in.peers,
               absl::GetFlag(FLAGS_link_mbps), absl::GetFlag(FLAGS_rtt_ms));
  if (p.sharded) {
    absl::PrintF(
        "  --zero 1: reduce-scatter of the gradients during backward; after the update the\n"
        "  allgather of the fp32 parameters and the replica forward (top-k and auto refused)\n");
  }
  const bool timed = !p.peer_gflops.empty();
  if (timed) {
    absl::PrintF("  compute %.2f s per step (balanced); last backward %.2f s hides communication\n",
                 p.compute_s, p.backward_s);
  }
  absl::PrintF("  %-12s %12s %10s%s %s\n", "codec", "wire bytes", "seconds",
               p.sharded ? "  after update" : "", timed ? "hidden" : "");
  std::vector<std::string> codec_json;
  for (const train::CodecEstimate& e : p.codecs) {
    const std::string after =
        p.sharded ? absl::StrFormat(" %13.3f", e.seconds - e.backward_seconds) : "";
    absl::PrintF("  %-12s %12s %10.3f%s %s\n", e.codec, Gb(e.wire_bytes), e.seconds, after,
                 timed ? (e.hides ? "yes" : "no") : "");
    codec_json.push_back(absl::StrFormat(
        "{\"codec\":\"%s\",\"wire_bytes\":%.0f,\"seconds\":%.6f,\"backward_seconds\":%.6f,"
        "\"hides\":%s}",
        e.codec, e.wire_bytes, e.seconds, e.backward_seconds, e.hides ? "true" : "false"));
  }
  // With the comparison below, the per-step codec is one row of it, not the advice: the
  // 1B model at 100 Mbit/s gets top-k at 0.3% here (it hides), which has not been shown to
  // learn well, while the comparison suggests round sync.
  const bool compare = timed && p.round.every == 0 && in.peers >= 2;
  if (compare) {
    absl::PrintF(
        "  per-step --compress auto would use %s (what learns well: the comparison below)\n",
        p.recommended_codec);
  } else {
    absl::PrintF("  suggested --compress %s\n", p.recommended_codec);
  }
  if (timed && p.round.every == 0) PrintStepTime(p);
  std::string sync_json;
  if (compare) {
    absl::StatusOr<train::SyncComparison> compared = train::CompareSync(in);
    if (!compared.ok()) {
      std::fprintf(stderr, "ringtrain plan: %s\n",
                   std::string(compared.status().message()).c_str());
      return 2;
    }
    sync_json = PrintSyncComparison(*compared);
  }
  std::string round_json;
  if (p.round.every > 0) {
    const train::RoundEstimate& r = p.round;
    absl::PrintF(
        "\nround sync (--outer-every %d --outer-compress %s --outer-overlap %s; the per-step\n"
        "rows above are what it replaces)\n",
        r.every, r.codec, r.overlap ? "on" : "off");
    absl::PrintF("  exchange per round %s per peer, %.1f s; hidden %.1f s%s\n", Gb(r.wire_bytes),
                 r.exchange_s, r.hidden_s,
                 r.overlap ? " (beside the next round)" : " (overlap off: none hides)");
    if (timed) {
      absl::PrintF("  compute per round %.1f s (%d inner steps, shares by speed), round %.1f s\n",
                   r.compute_s, r.every, r.round_s);
      absl::PrintF("  %.0f tokens/s = %.1f%% of compute only (%.0f tokens/s)\n", r.tokens_per_s,
                   100 * r.tokens_per_s / r.compute_only_tokens_per_s, r.compute_only_tokens_per_s);
    }
    if (r.sharded) {
      absl::PrintF(
          "  outer state: round-start copy + momentum of own and replica pieces + staged "
          "momentum\n  %s per peer at an outer step (sharded over %d peers; %s whole)\n",
          Gb(r.outer_state_bytes), in.peers, Gb(8.0 * static_cast<double>(p.n_params)));
    } else {
      absl::PrintF("  outer state: round-start copy + momentum%s %s per peer (not sharded)\n",
                   r.overlap ? " + anchor + exchange buffer" : "", Gb(r.outer_state_bytes));
    }
    round_json = absl::StrFormat(
        ",\"round\":{\"outer_every\":%d,\"outer_compress\":\"%s\",\"wire_bytes\":%.0f,"
        "\"exchange_s\":%.6f,\"hidden_s\":%.6f,\"compute_s\":%.6f,\"round_s\":%.6f,"
        "\"tokens_per_s\":%.1f,\"compute_only_tokens_per_s\":%.1f,\"outer_state_bytes\":%.0f,"
        "\"overlap\":%s,\"outer_shard\":%s}",
        r.every, r.codec, r.wire_bytes, r.exchange_s, r.hidden_s, r.compute_s, r.round_s,
        r.tokens_per_s, r.compute_only_tokens_per_s, r.outer_state_bytes,
        r.overlap ? "true" : "false", r.sharded ? "true" : "false");
  }
  const std::string cost_json =
      train_tokens > 0 ? PrintRunCost(p, in.peers, train_tokens, gpus, gpu_file) : "";

  absl::PrintF(
      "{\"params\":%zu,\"flops_per_token\":%.0f,\"tokens_per_step\":%lld,\"zero\":%d,"
      "\"sharded\":%s,\"memory_bytes\":%.0f,\"activation_bytes\":%.0f,\"ram_bytes\":%.0f,"
      "\"fits\":%s,\"max_batch\":%d,"
      "\"compute_s\":%.6f,\"codecs\":[%s],\"suggested_compress\":\"%s\",\"peer_gflops\":[%s],"
      "\"equal_slots\":[%s],\"balanced_slots\":[%s],\"equal_step_s\":%.6f,"
      "\"balanced_step_s\":%.6f,\"equal_tokens_per_s\":%.1f,\"balanced_tokens_per_s\":%.1f%s%s%s}"
      "\n",
      p.n_params, p.flops_per_token, static_cast<long long>(p.tokens_per_step), in.zero,
      p.sharded ? "true" : "false", p.total, p.activations, in.ram_bytes, p.fits ? "true" : "false",
      p.max_batch_that_fits, p.compute_s, absl::StrJoin(codec_json, ","), p.recommended_codec,
      absl::StrJoin(p.peer_gflops, ","), absl::StrJoin(p.equal_shares, ","),
      absl::StrJoin(p.balanced_shares, ","), p.equal_step_s, p.balanced_step_s,
      p.equal_tokens_per_s, p.balanced_tokens_per_s, cost_json, round_json, sync_json);
  return 0;
}

std::vector<std::string> PlanFlags() {
  std::vector<std::string> flags = ModelFlagNames();
  for (const char* f :
       {"vocab", "compress", "zero", "peers", "ram_gb", "reserve_gb", "gflops", "max_skew",
        "link_mbps", "rtt_ms", "train_tokens", "price_per_hour", "gpu_prices", "bucket_mb"}) {
    flags.emplace_back(f);
  }
  for (const std::string& f : RoundSyncFlagNames()) flags.push_back(f);
  return flags;
}

}  // namespace

const Subcommand& PlanSubcommand() {
  static const Subcommand sub{
      "plan", "Memory per peer and predicted step time of a model on N peers",
      "ringtrain plan [model flags] [--vocab V] --peers N [--ram-gb 32] [--gflops G|G1,G2,...]\n"
      "               [--zero 0|1]\n"
      "               [--max-skew 8] [--link-mbps 1000] [--rtt-ms 0.5] [--compress ...]\n"
      "               [--train-tokens 2B --price-per-hour P [--gpu-prices FILE]]\n"
      "               [--outer-every H [--outer-compress none|bf16|int8|int4|topk:D]\n"
      "                [--outer-overlap on|off] [--outer-shard on|off]]\n"
      "Prints memory per peer (exact for what ringtrain allocates), the largest --batch that\n"
      "fits, and per codec the bytes each peer sends per step and the predicted time; with\n"
      "--gflops (from `ringtrain bench compute`) also whether it hides behind backward and the\n"
      "predicted step time and tokens/s. One figure per peer plans an unequal fleet: each\n"
      "peer's share of the global batch (batch x accum x peers sequences) split equally and\n"
      "by speed as `train --balance on` does, with the step time of both. --train-tokens\n"
      "adds the run's time, tokens per day and cost (--price-per-hour per peer), and\n"
      "--gpu-prices FILE the same tokens on one rented GPU of each offer in FILE. --zero 1\n"
      "plans sharded optimizer state as `train --zero 1` runs it: the moments of 1/N of\n"
      "the parameters, a replica of the predecessor's and their gradient staging (a\n"
      "checkpoint adds nothing: its writers stream the moments to disk as they arrive);\n"
      "--compress none or bf16 only.\n"
      "--outer-every H plans round sync: bytes and seconds of the exchange per round, how\n"
      "much of it hides, tokens/s against compute only, and the outer state's memory\n"
      "(--outer-shard on: sharded over the ring as train holds it).",
      PlanFlags(), &RunPlan};
  return sub;
}

}  // namespace rt::cli
