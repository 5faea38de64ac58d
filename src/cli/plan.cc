// `ringtrain plan`: memory per peer and predicted step time for a model on N peers,
// before renting anything. Human table, then one JSON line. The arithmetic lives in
// src/train/run_plan.{h,cc}; this file parses flags and prints.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "train/run_plan.h"

ABSL_FLAG(int, peers, 8, "plan: number of peers in the ring");
ABSL_FLAG(double, ram_gb, 32, "plan: RAM per peer, GB (1e9 bytes)");
ABSL_FLAG(double, reserve_gb, 1.5, "plan: RAM kept for the OS, page cache and process, GB");
ABSL_FLAG(std::string, gflops, "0",
          "plan: achieved GFLOP/s (from `ringtrain bench compute`): one figure for every peer "
          "(120) or one per peer (120,120,80,60: as many as --peers); 0 = no time estimate");
ABSL_DECLARE_FLAG(double, max_skew);  // train's (src/cli/train.cc): plan splits as train does
ABSL_FLAG(double, link_mbps, 1000, "plan: bottleneck link bandwidth of the ring, Mbit/s");
ABSL_FLAG(double, rtt_ms, 0.5, "plan: round-trip time per ring hop, ms");

namespace rt::cli {
namespace {

std::string Gb(double bytes) { return absl::StrFormat("%.2f GB", bytes / 1e9); }

// The step as `train` runs it: each peer's share of the global batch, split equally
// (--balance off) and by speed (--balance on), and the predicted step time of both.
void PrintStepTime(const train::RunPlan& p) {
  const size_t n = p.peer_gflops.size();
  bool equal_peers = true;
  for (double g : p.peer_gflops) equal_peers = equal_peers && g == p.peer_gflops[0];
  absl::PrintF("\nstep time (slowest share + communication not hidden, suggested codec)\n");
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
  if (in.options.max_batch < 1) {
    std::fprintf(stderr, "ringtrain plan: --batch must be >= 1, got %d\n", in.options.max_batch);
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
  absl::PrintF("\nmemory per peer\n");
  absl::PrintF("  parameters (fp32)        %10s\n", Gb(p.params));
  absl::PrintF("  gradients (fp32)         %10s\n", Gb(p.grads));
  absl::PrintF("  AdamW moments (fp32 x2)  %10s\n", Gb(p.adam));
  if (p.bf16_weights > 0) absl::PrintF("  bf16 weight copy         %10s\n", Gb(p.bf16_weights));
  if (p.residual > 0) absl::PrintF("  codec residual           %10s\n", Gb(p.residual));
  absl::PrintF("  activations (batch %3d)  %10s\n", in.options.max_batch, Gb(p.activations));
  absl::PrintF("  reserve (OS, cache)      %10s\n", Gb(p.reserve));
  absl::PrintF("  total                    %10s of %s: %s\n", Gb(p.total), Gb(in.ram_bytes),
               p.fits ? "fits" : "DOES NOT FIT");
  if (p.max_batch_that_fits == 0) {
    absl::PrintF("  even --batch 1 does not fit%s\n",
                 in.options.recompute ? "" : "; try --recompute or a smaller model");
  } else {
    absl::PrintF("  largest --batch that fits: %d%s\n", p.max_batch_that_fits,
                 !p.fits && !in.options.recompute ? " (or add --recompute)" : "");
  }

  absl::PrintF("\ncommunication per step (ring of %d, %.0f Mbit/s, %.2f ms RTT)\n", in.peers,
               absl::GetFlag(FLAGS_link_mbps), absl::GetFlag(FLAGS_rtt_ms));
  const bool timed = !p.peer_gflops.empty();
  if (timed) {
    absl::PrintF("  compute %.2f s per step (balanced); last backward %.2f s hides communication\n",
                 p.compute_s, p.backward_s);
  }
  absl::PrintF("  %-12s %12s %10s %s\n", "codec", "wire bytes", "seconds", timed ? "hidden" : "");
  std::vector<std::string> codec_json;
  for (const train::CodecEstimate& e : p.codecs) {
    absl::PrintF("  %-12s %12s %10.3f %s\n", e.codec, Gb(e.wire_bytes), e.seconds,
                 timed ? (e.hides ? "yes" : "no") : "");
    codec_json.push_back(
        absl::StrFormat("{\"codec\":\"%s\",\"wire_bytes\":%.0f,\"seconds\":%.6f,\"hides\":%s}",
                        e.codec, e.wire_bytes, e.seconds, e.hides ? "true" : "false"));
  }
  absl::PrintF("  suggested --compress %s\n", p.recommended_codec);
  if (timed) PrintStepTime(p);

  absl::PrintF(
      "{\"params\":%zu,\"flops_per_token\":%.0f,\"tokens_per_step\":%lld,\"memory_bytes\":%.0f,"
      "\"activation_bytes\":%.0f,\"ram_bytes\":%.0f,\"fits\":%s,\"max_batch\":%d,"
      "\"compute_s\":%.6f,\"codecs\":[%s],\"suggested_compress\":\"%s\",\"peer_gflops\":[%s],"
      "\"equal_slots\":[%s],\"balanced_slots\":[%s],\"equal_step_s\":%.6f,"
      "\"balanced_step_s\":%.6f,\"equal_tokens_per_s\":%.1f,\"balanced_tokens_per_s\":%.1f}\n",
      p.n_params, p.flops_per_token, static_cast<long long>(p.tokens_per_step), p.total,
      p.activations, in.ram_bytes, p.fits ? "true" : "false", p.max_batch_that_fits, p.compute_s,
      absl::StrJoin(codec_json, ","), p.recommended_codec, absl::StrJoin(p.peer_gflops, ","),
      absl::StrJoin(p.equal_shares, ","), absl::StrJoin(p.balanced_shares, ","), p.equal_step_s,
      p.balanced_step_s, p.equal_tokens_per_s, p.balanced_tokens_per_s);
  return 0;
}

std::vector<std::string> PlanFlags() {
  std::vector<std::string> flags = ModelFlagNames();
  for (const char* f : {"vocab", "compress", "peers", "ram_gb", "reserve_gb", "gflops", "max_skew",
                        "link_mbps", "rtt_ms"}) {
    flags.emplace_back(f);
  }
  return flags;
}

}  // namespace

const Subcommand& PlanSubcommand() {
  static const Subcommand sub{
      "plan", "Memory per peer and predicted step time of a model on N peers",
      "ringtrain plan [model flags] [--vocab V] --peers N [--ram-gb 32] [--gflops G|G1,G2,...]\n"
      "               [--max-skew 8] [--link-mbps 1000] [--rtt-ms 0.5] [--compress ...]\n"
      "Prints memory per peer (exact for what ringtrain allocates), the largest --batch that\n"
      "fits, and per codec the bytes each peer sends per step and the predicted time; with\n"
      "--gflops (from `ringtrain bench compute`) also whether it hides behind backward and the\n"
      "predicted step time and tokens/s. One figure per peer plans an unequal fleet: each\n"
      "peer's share of the global batch (batch x accum x peers sequences) split equally and\n"
      "by speed as `train --balance on` does, with the step time of both.",
      PlanFlags(), &RunPlan};
  return sub;
}

}  // namespace rt::cli
