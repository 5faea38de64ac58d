// `ringtrain bench compute`: tokens/s and MFU of full training steps (forward, backward,
// AdamW) on random tokens, against the oneDNN matmul peak measured in the same run on
// the same threads. Prints a human table, then (last line) one JSON object (DESIGN).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "cli/bench_common.h"
#include "cli/bench_kinds.h"
#include "cli/common_flags.h"
#include "core/aligned_buffer.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "model/gpt.h"
#include "model/matmul.h"
#include "model/matmul_speed.h"
#include "model/onednn_isa.h"
#include "optim/adamw.h"

ABSL_FLAG(int, warmup_steps, 2, "bench compute: untimed steps before the timed --steps");
ABSL_FLAG(bool, profile, false, "bench compute: print the time per layer kind");

namespace rt::cli {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "ringtrain bench compute: %s\n", message.c_str());
  return 1;
}
int Fail(const absl::Status& status) { return Fail(std::string(status.message())); }

// The matmul peaks of the run: fp32 always; bf16 where oneDNN can run it (natively or
// emulated). A bf16 matmul that oneDNN cannot create or run is not an error unless
// the bench itself is bf16: then bf16 is reported as unavailable.
struct Peaks {
  model::MatmulSpeed fp32, bf16;
  model::Bf16Support bf16_support = model::Bf16Support::kUnavailable;
};

// Measures the peaks and keeps, per precision, the better of this and `*p` (the host is
// shared: a busy moment must not inflate MFU). Errors: the fp32 matmul fails, or the
// bf16 one does and `need_bf16`.
absl::Status MeasurePeaks(bool need_bf16, Peaks* p) {
  absl::StatusOr<model::MatmulSpeed> f = model::MeasureMatmul(model::MatType::kF32, 2048, 3);
  if (!f.ok()) return f.status();
  if (f->gflops > p->fp32.gflops) p->fp32 = *f;
  if (p->bf16_support == model::Bf16Support::kUnavailable) return absl::OkStatus();
  absl::StatusOr<model::MatmulSpeed> h = model::MeasureMatmul(model::MatType::kBf16, 2048, 4);
  if (!h.ok()) {
    if (need_bf16) return h.status();
    std::fprintf(stderr, "ringtrain bench compute: bf16 left out: %s\n",
                 std::string(h.status().message()).c_str());
    p->bf16_support = model::Bf16Support::kUnavailable;
    p->bf16 = {};
    return absl::OkStatus();
  }
  if (h->gflops > p->bf16.gflops) p->bf16 = *h;
  return absl::OkStatus();
}

}  // namespace

int RunBenchCompute(const std::vector<std::string>& positional) {
  if (!positional.empty()) return Fail("unexpected argument '" + positional[0] + "'");
  model::GptConfig config;
  config.n_layers = absl::GetFlag(FLAGS_layers);
  config.n_heads = absl::GetFlag(FLAGS_heads);
  config.dim = absl::GetFlag(FLAGS_dim);
  config.seq_len = absl::GetFlag(FLAGS_seq_len);
  config.vocab_size = absl::GetFlag(FLAGS_vocab);
  if (absl::Status s = ApplyArchFlags(&config); !s.ok()) return Fail(std::string(s.message()));
  if (absl::Status s = config.Validate(); !s.ok()) return Fail(std::string(s.message()));
  const int batch = absl::GetFlag(FLAGS_batch), accum = absl::GetFlag(FLAGS_accum);
  const int warmup = absl::GetFlag(FLAGS_warmup_steps);
  // bench's own default for --steps (a few steps) is set by Subcommand::flag_defaults.
  const int steps = absl::GetFlag(FLAGS_steps);
  if (batch < 1) return Fail(absl::StrFormat("--batch must be at least 1, got %d", batch));
  if (accum < 1) return Fail(absl::StrFormat("--accum must be at least 1, got %d", accum));
  if (steps < 1) return Fail(absl::StrFormat("--steps must be at least 1, got %d", steps));
  if (warmup < 0) return Fail(absl::StrFormat("--warmup-steps must be >= 0, got %d", warmup));
  absl::StatusOr<model::Precision> precision =
      model::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) return Fail("--precision: " + std::string(precision.status().message()));
  const bool recompute = absl::GetFlag(FLAGS_recompute);
  const bool profile = absl::GetFlag(FLAGS_profile);
  const int threads = ApplyThreadsFlag();
  const bool is_bf16 = *precision == model::Precision::kBf16;

  // What the (perhaps capped) CPU runs: oneDNN's ISA and how it does bf16.
  Peaks peaks;
  peaks.bf16_support = model::GetBf16Support();  // applies RINGTRAIN_ISA's cap first
  const std::string isa = model::OnednnIsaName();
  if (is_bf16 && peaks.bf16_support == model::Bf16Support::kUnavailable) {
    return Fail(absl::StrFormat(
        "error: --precision bf16: bf16 is not available on this CPU (oneDNN ISA %s has no bf16 "
        "matmul); use --precision fp32",
        isa));
  }
  auto created = model::Gpt::Create(config, model::GptOptions{*precision, recompute, batch});
  if (!created.ok()) return Fail(created.status());
  std::unique_ptr<model::Gpt> gpt = std::move(created).value();
  const model::ParamLayout& layout = gpt->layout();
  const size_t n_params = layout.total_floats();
  AlignedBuffer<float> params(n_params), grads(n_params);
  gpt->InitParams(params.span(), absl::GetFlag(FLAGS_seed));
  optim::AdamW adamw(optim::AdamWConfig{}, n_params, layout.DecayRanges());

  const int T = config.seq_len;
  std::mt19937 rng(static_cast<uint32_t>(absl::GetFlag(FLAGS_seed)));
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * (T + 1));
  const float grad_scale = 1.0f / static_cast<float>(static_cast<int64_t>(batch) * T * accum);
  double optim_ms = 0.0, last_loss = 0.0;
  int64_t t = 0;
  auto step = [&]() -> absl::Status {
    grads.Zero();
    for (int a = 0; a < accum; ++a) {
      for (int32_t& x : tokens) x = static_cast<int32_t>(rng() % config.vocab_size);
      std::vector<int32_t> in, out;
      for (int b = 0; b < batch; ++b) {
        const int32_t* row = tokens.data() + static_cast<size_t>(b) * (T + 1);
        in.insert(in.end(), row, row + T);
        out.insert(out.end(), row + 1, row + T + 1);
      }
      last_loss = gpt->ForwardBackward(params.span(), in.data(), out.data(), batch, grad_scale,
                                       grads.span()) /
                  (static_cast<double>(batch) * T);
      if (!gpt->status().ok()) return gpt->status();
    }
    Stopwatch sw;
    adamw.Step(params.span(), grads.span(), 1e-4f, ++t);
    optim_ms += sw.ElapsedMs();
    return absl::OkStatus();
  };

  // The host is shared: measure the peaks before and after the timed steps and keep the
  // better figure, so that a busy moment cannot inflate MFU.
  if (absl::Status s = MeasurePeaks(is_bf16, &peaks); !s.ok()) return Fail(s);
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status s = step(); !s.ok()) return Fail(s);
  }
  gpt->TakeProfile();  // drop warm-up times
  gpt->EnableProfile(profile);
  optim_ms = 0.0;
  std::vector<double> step_ms;
  Stopwatch total;
  for (int i = 0; i < steps; ++i) {
    Stopwatch sw;
    if (absl::Status s = step(); !s.ok()) return Fail(s);
    step_ms.push_back(sw.ElapsedMs());
  }
  const double seconds = total.ElapsedSeconds();
  model::LayerProfile prof = gpt->TakeProfile();

  if (absl::Status s = MeasurePeaks(is_bf16, &peaks); !s.ok()) return Fail(s);
  const double peak_fp32 = peaks.fp32.gflops, peak_bf16 = peaks.bf16.gflops;
  const double peak = is_bf16 ? peak_bf16 : peak_fp32;

  const double tokens_per_step = static_cast<double>(batch) * T * accum;
  const double flops_per_token = 6.0 * static_cast<double>(layout.flop_params()) +
                                 12.0 * config.n_layers * static_cast<double>(T) * config.dim;
  const double tokens_per_s = tokens_per_step * steps / seconds;
  const double achieved = tokens_per_s * flops_per_token * 1e-9;
  const double mfu = achieved / peak;
  // 6N counts every matmul weight (llama: SwiGLU's three matrices, an untied LM head),
  // plus 12 L T C for the attention's two T x T products; norms, RoPE, GELU/SwiGLU's
  // element-wise work are not counted (as PaLM and nanoGPT do).
  // MFU as PaLM and nanoGPT count it (above) takes attention as a full T x T product.
  // Only the causal half is needed, and the model computes little more than that
  // (model/causal_attention.h), so the stricter figure is printed too: attention at
  // 6 L T C per token.
  const double causal_flops_per_token =
      flops_per_token - 6.0 * config.n_layers * static_cast<double>(T) * config.dim;
  const double mfu_causal = mfu * causal_flops_per_token / flops_per_token;
  std::sort(step_ms.begin(), step_ms.end());
  const double mean_ms = seconds * 1e3 / steps;
  const double activation_mb = static_cast<double>(gpt->ActivationBytes()) / (1 << 20);
  const double rss = PeakRssMb();

  std::printf("bench compute: %s, %s, recompute=%s, threads=%d, %s\n", config.ToString().c_str(),
              model::PrecisionName(*precision), recompute ? "on" : "off", threads,
              DescribeCpu().c_str());
  std::printf("  params            %12zu (flop params %zu)\n", n_params, layout.flop_params());
  std::printf("  tokens/step       %12.0f (batch %d x seq %d x accum %d)\n", tokens_per_step, batch,
              T, accum);
  std::printf(
      "  step time         %12.1f ms mean, %.1f min, %.1f max (%d steps after %d warm-up)\n",
      mean_ms, step_ms.front(), step_ms.back(), steps, warmup);
  std::printf("  tokens/s          %12.1f\n", tokens_per_s);
  std::printf("  achieved          %12.1f GFLOP/s (%.3g GFLOP/token)\n", achieved,
              flops_per_token * 1e-9);
  std::printf("  oneDNN ISA        %12s (bf16 %s)\n", isa.c_str(),
              model::Bf16SupportName(peaks.bf16_support));
  std::printf(
      "  matmul peak fp32  %12.1f GFLOP/s (%s; oneDNN 2048^3, same threads, best before/after)\n",
      peak_fp32, peaks.fp32.impl.c_str());
  switch (peaks.bf16_support) {
    case model::Bf16Support::kNative:
      std::printf("  matmul peak bf16  %12.1f GFLOP/s (%s)\n", peak_bf16, peaks.bf16.impl.c_str());
      break;
    case model::Bf16Support::kEmulated:
      std::printf(
          "  matmul peak bf16  %12.1f GFLOP/s (%s): emulated, no avx512_bf16/AMX in ISA %s, "
          "%.1fx slower than fp32\n",
          peak_bf16, peaks.bf16.impl.c_str(), isa.c_str(), peak_fp32 / peak_bf16);
      break;
    case model::Bf16Support::kUnavailable:
      std::printf("  bf16: not available on this CPU (ISA %s)\n", isa.c_str());
      break;
  }
  std::printf("  MFU               %12.1f %% of the %s peak\n", 100.0 * mfu,
              model::PrecisionName(*precision));
  std::printf("  MFU, causal count %12.1f %% (attention counted for its causal half only)\n",
              100.0 * mfu_causal);
  std::printf("  activations       %12.1f MB\n", activation_mb);
  std::printf("  peak RSS          %12.1f MB\n", rss);
  std::printf("  last loss         %12.4f\n", last_loss);
  if (profile) {
    std::printf("  time per step by layer kind:\n");
    double sum = 0.0;
    for (const auto& [name, ms] : prof.ms) sum += ms;
    prof.ms.emplace_back("adamw step", optim_ms);
    std::sort(prof.ms.begin(), prof.ms.end(),
              [](const auto& a, const auto& b) { return a.second > b.second; });
    for (const auto& [name, ms] : prof.ms) {
      std::printf("    %-26s %10.2f ms %6.1f %%\n", name.c_str(), ms / steps,
                  100.0 * ms / steps / mean_ms);
    }
    std::printf("    %-26s %10.2f ms %6.1f %%\n", "other (untimed)",
                mean_ms - (sum + optim_ms) / steps,
                100.0 * (mean_ms - (sum + optim_ms) / steps) / mean_ms);
  }
  std::printf(
      "{\"bench\":\"compute\",\"arch\":\"%s\",\"ffn_dim\":%d,\"precision\":\"%s\","
      "\"threads\":%d,\"layers\":%d,\"heads\":%d,"
      "\"dim\":%d,\"seq_len\":%d,\"batch\":%d,\"accum\":%d,\"vocab\":%d,\"recompute\":%s,"
      "\"params\":%zu,\"steps\":%d,\"step_ms\":%.3f,\"tokens_per_s\":%.2f,"
      "\"achieved_gflops\":%.2f,\"peak_gflops\":%.2f,\"peak_fp32_gflops\":%.2f,"
      "\"peak_bf16_gflops\":%.2f,\"isa\":\"%s\",\"bf16\":\"%s\",\"mfu\":%.4f,\"mfu_causal\":%.4f,"
      "\"activation_mb\":%.1f,\"peak_rss_mb\":%.1f}\n",
      model::ArchName(config.arch), config.Hidden(), model::PrecisionName(*precision), threads,
      config.n_layers, config.n_heads, config.dim, T, batch, accum, config.vocab_size,
      recompute ? "true" : "false", n_params, steps, mean_ms, tokens_per_s, achieved, peak,
      peak_fp32, peak_bf16, isa.c_str(), model::Bf16SupportName(peaks.bf16_support), mfu,
      mfu_causal, activation_mb, rss);
  return 0;
}

std::vector<std::string> BenchComputeFlagNames() {
  std::vector<std::string> names = ModelFlagNames();
  for (const char* f : {"vocab", "steps", "seed", "warmup_steps", "profile"}) names.push_back(f);
  return names;
}

}  // namespace rt::cli
