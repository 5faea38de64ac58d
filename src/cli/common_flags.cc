// Definitions of the flags shared by several subcommands (see common_flags.h).
#include "cli/common_flags.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "collective/codec_spec.h"
#include "core/cpu_features.h"
#include "core/status_macros.h"

ABSL_FLAG(std::string, out, "",
          "Output: prepare's data directory (created if missing; old shards replaced); "
          "export's file (gguf) or directory (safetensors)");

ABSL_FLAG(bool, json, false,
          "Print one JSON object instead of text (status: the ring; sample: checkpoint, step, "
          "precision, prompt_ids, ids, text)");

ABSL_FLAG(int, layers, 6, "Transformer blocks");
ABSL_FLAG(int, heads, 6, "Attention heads per block (must divide --dim)");
ABSL_FLAG(int, dim, 384, "Model width (embedding dimension)");
ABSL_FLAG(int, seq_len, 256, "Tokens per training sequence (also the position-table size)");
ABSL_FLAG(int, batch, 8, "Sequences per peer per micro-step");
ABSL_FLAG(int, accum, 1, "Micro-steps accumulated per optimizer step");
ABSL_FLAG(int, vocab, 8192, "Vocabulary size (bench/plan only; train reads it from the data)");
ABSL_FLAG(std::string, precision, "auto",
          "Matmul inputs: fp32, bf16 (fp32 accumulation and master weights), or auto "
          "(bf16 where the CPU has AVX-512-BF16 or AMX)");
ABSL_FLAG(bool, recompute, false, "Recompute each block's activations in backward to save memory");
ABSL_FLAG(int, threads, 0, "Compute threads (0 = all cores)");
ABSL_FLAG(std::string, arch, "gpt2",
          "Block design: gpt2 (LayerNorm, learned positions, GELU MLP, biases) or llama "
          "(RMSNorm, rotary embeddings, SwiGLU MLP, no biases)");
ABSL_FLAG(double, rope_theta, 10000, "--arch llama: base of the rotary embeddings' angles");
ABSL_FLAG(int, ffn_dim, 0,
          "--arch llama: SwiGLU hidden size (0 = 8/3 * --dim rounded up to a multiple of 64)");
ABSL_FLAG(bool, untied, false,
          "--arch llama: a separate LM head matrix instead of the input embedding's");

ABSL_FLAG(double, lr, 6e-4, "Peak learning rate");
ABSL_FLAG(double, min_lr, 6e-5, "Learning rate at the end of the cosine decay");
ABSL_FLAG(int, warmup, 100, "Linear warm-up steps");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW decoupled weight decay (2-D weights only)");
ABSL_FLAG(double, clip, 1.0, "Global gradient-norm clip (0 = off)");
ABSL_FLAG(int, steps, 1000, "Optimizer steps");
ABSL_FLAG(uint64_t, seed, 1337, "Seed for initialisation and data order");

ABSL_FLAG(std::string, data, "", "Data directory written by `ringtrain prepare`");
ABSL_FLAG(std::string, ckpt, "", "Checkpoint directory to read (a step directory or a --ckpt-dir)");
ABSL_FLAG(std::string, ckpt_dir, "", "Directory for checkpoints (empty = none)");
ABSL_FLAG(std::string, metrics, "", "Append one JSON object per step to this file");

ABSL_FLAG(std::string, hosts, "", "Hosts file: one HOST[:PORT] per line; line order is rank order");
ABSL_FLAG(std::string, self, "", "This peer's HOST:PORT as written in the hosts file");
ABSL_FLAG(int, rank, -1, "This peer's line (0-based) in the hosts file");
ABSL_FLAG(double, wait, 120, "Seconds to wait for the ring to form");
ABSL_FLAG(std::string, secret_file, "",
          "File holding the shared secret (else $RINGTRAIN_SECRET; optional on loopback)");
ABSL_FLAG(std::string, encrypt, "auto",
          "Seal every frame of every link with AES-256-GCM under per-connection keys: "
          "auto|on|off (auto = on unless every host is loopback; on needs the shared secret)");
ABSL_FLAG(std::string, compress, "none", "Gradient codec: none|bf16|topk:DENSITY|auto");
ABSL_FLAG(int, zstd_level, 0, "zstd level on the wire (0 = off)");
ABSL_FLAG(double, bucket_mb, 25, "Gradient bucket size in MB for overlapped allreduce");
// Optimizer sharding: train shards the AdamW moments over a ring, plan sizes it.
ABSL_FLAG(int, zero, 0,
          "Optimizer sharding: 0 = every peer holds all AdamW state; 1 = ZeRO stage 1, each "
          "peer of a ring keeps the moments of its pieces plus a replica of its predecessor's "
          "(--compress none or bf16)");
ABSL_FLAG(int, probe_every, 0,
          "Probe every link (bandwidth, RTT) and re-order the ring at the first step and "
          "every N steps; 0 = once at the first step when --compress auto or >= 3 peers; "
          "-1 = never (keep the hosts-file order; not with --compress auto)");
ABSL_FLAG(double, comm_budget, 0,
          "--compress auto: communication may take this fraction of the step's compute "
          "time (0 = it must hide behind the backward pass)");
// Warm-up of top-k (collective/codec_spec.h TopKDensityAt): N dense steps, in
// which AdamW measures the second moment that preconditioned top-k freezes (optim/adamw.h),
// then N steps of geometrically falling density. Measured on the 3-peer learning curves
// (tools/learning-curves, 300 steps, top-k 1%, gap to dense at the end): N = 0 (top-k from
// the first step, residuals straight into AdamW) +7.3%, N = 50 +2.5%, N = 75 +1.5%.
// Over 3,000 steps (small series, top-k 0.1%) a fixed N = 75 ended far above
// dense while N = 300, a tenth of the run, stayed close (README "Learning with
// compression"): v frozen at step 75 no longer fits the gradients of a long run and the
// residuals of a short ramp come out in bursts. Hence the default: a tenth of --steps,
// at least 75 (which keeps the short runs' measured figures). A longer warm-up costs
// more dense exchanges; see README.
ABSL_FLAG(int, topk_warmup, -1,
          "Top-k warm-up: N dense steps (AdamW's second moment is then frozen and each peer "
          "preconditions its gradient before top-k), then N steps of density falling to "
          "--compress topk:D (0 = top-k from the first step, no preconditioning; -1 = a "
          "tenth of --steps, at least 75); with --compress auto: no top-k in the first N "
          "steps, the same ramp after them, and every bucket preconditioned from step N on");

// Refresh steps of preconditioned top-k (collective/codec_spec.h
// IsTopKRefreshStep): after the ramp, every K-th step is exchanged dense without the
// residual, so AdamW's frozen second moment learns from an exact sum (optim/adamw.h,
// "refreshed") instead of staying as the warm-up measured it for the rest of the run.
ABSL_FLAG(int, topk_refresh, 0,
          "Preconditioned top-k: every N-th step after the warm-up's ramp sends this step's "
          "gradient dense (the residual waits), so AdamW's second moment learns again; costs "
          "one dense exchange per N steps (0 = never: v stays frozen after the warm-up)");

// Round sync (DiLoCo family; train and plan).
ABSL_FLAG(int, outer_every, 0,
          "Round sync: each peer takes H inner steps on its own slots without communication, "
          "then the ring averages the pseudo-gradients and an outer Nesterov step updates the "
          "shared parameters (0 = per-step gradient sync)");
ABSL_FLAG(double, outer_lr, 0.7, "Round sync: outer learning rate");
ABSL_FLAG(double, outer_momentum, 0.9, "Round sync: outer Nesterov momentum, in [0, 1)");
ABSL_FLAG(std::string, outer_compress, "none",
          "Round sync: codec of the outer exchange, none|bf16|int8|int4|topk:DENSITY, with "
          "error feedback kept per peer across rounds");
ABSL_FLAG(int, outer_after, 0,
          "With --outer-every (train only): per-step gradient sync (with --compress) until "
          "step N, then round sync, switched inside the run as a checkpoint at N resumed with "
          "--outer-every would be (0 = round sync from the start)");
ABSL_FLAG(double, inner_lr_scale, 1.0,
          "Round sync: the inner steps take F x the --lr schedule (with --outer-after, from "
          "the switch on; the per-step steps before it keep the schedule); in (0, 10]");
ABSL_FLAG(std::string, outer_overlap, "on",
          "Round sync: on = each round's exchange runs beside the next round's inner steps and "
          "its outer step is applied one round late (hidden when it fits in a round); off = "
          "the ring waits for the exchange at every round's end");
ABSL_FLAG(std::string, outer_shard, "off",
          "Round sync with --outer-compress none and --outer-overlap off: on = the round-start "
          "copy and the outer momentum are held by segment owners over the ring (and a replica "
          "on the next peer) instead of whole on every peer: 16n/N bytes per peer instead of "
          "8n, the same bits; off = whole on every peer");

// --topk-warmup's default: a tenth of the run, at least 75 steps.
constexpr int kMinDefaultTopKWarmup = 75;

namespace rt::cli {

std::vector<std::string> ModelFlagNames() {
  return {"layers",    "heads",   "dim",  "seq_len",    "batch",   "accum", "precision",
          "recompute", "threads", "arch", "rope_theta", "ffn_dim", "untied"};
}

absl::Status ApplyArchFlags(model::GptConfig* config) {
  absl::StatusOr<model::Arch> arch = model::ParseArch(absl::GetFlag(FLAGS_arch));
  if (!arch.ok())
    return absl::InvalidArgumentError(absl::StrCat("--arch: ", arch.status().message()));
  const double theta = absl::GetFlag(FLAGS_rope_theta);
  const int ffn_dim = absl::GetFlag(FLAGS_ffn_dim);
  const bool untied = absl::GetFlag(FLAGS_untied);
  if (*arch == model::Arch::kGpt2) {
    const char* llama_only = theta != 10000 ? "--rope-theta"
                             : ffn_dim != 0 ? "--ffn-dim"
                             : untied       ? "--untied"
                                            : nullptr;
    if (llama_only != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(llama_only, " applies to --arch llama only (this run is --arch gpt2)"));
    }
  }
  if (!std::isfinite(theta) || !(theta > 1) || theta > 1e12) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--rope-theta must be in (1, 1e12], got %g", theta));
  }
  if (ffn_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--ffn-dim must be positive (0 = default), got %d", ffn_dim));
  }
  config->arch = *arch;
  config->rope_theta = static_cast<float>(theta);
  config->ffn_dim = ffn_dim;
  config->untied = untied;
  return absl::OkStatus();
}
std::vector<std::string> OptimizerFlagNames() {
  return {"lr", "min_lr", "warmup", "weight_decay", "clip", "steps", "seed"};
}
std::vector<std::string> RingFlagNames() {
  return {"hosts",   "self",     "rank",       "wait",     "secret_file",
          "encrypt", "compress", "zstd_level", "bucket_mb"};
}

std::vector<std::string> CommFlagNames() {
  return {"probe_every", "comm_budget", "topk_warmup", "topk_refresh"};
}

std::vector<std::string> RoundSyncFlagNames() {
  return {"outer_every",   "outer_lr",       "outer_momentum", "outer_compress",
          "outer_overlap", "inner_lr_scale", "outer_shard"};
}

absl::StatusOr<sync::RoundSyncOptions> RoundSyncFromFlags() {
  sync::RoundSyncOptions o;
  o.every = absl::GetFlag(FLAGS_outer_every);
  o.outer_lr = static_cast<float>(absl::GetFlag(FLAGS_outer_lr));
  o.outer_momentum = static_cast<float>(absl::GetFlag(FLAGS_outer_momentum));
  o.after = absl::GetFlag(FLAGS_outer_after);
  o.inner_lr_scale = static_cast<float>(absl::GetFlag(FLAGS_inner_lr_scale));
  const std::string codec = absl::GetFlag(FLAGS_outer_compress);
  RETURN_IF_ERROR(o.Validate());
  const std::string overlap = absl::GetFlag(FLAGS_outer_overlap);
  if (overlap != "on" && overlap != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--outer-overlap must be on or off, got '", overlap, "'"));
  }
  o.overlap = overlap == "on" && o.enabled();
  if (codec == "auto") {
    return absl::InvalidArgumentError(
        "--outer-compress auto does not exist: name the codec (none, bf16, int8, int4, topk:D)");
  }
  absl::StatusOr<collective::CodecSpec> spec = collective::ParseCodecSpec(codec);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--outer-compress: ", spec.status().message()));
  }
  o.codec = *spec;
  const std::string shard = absl::GetFlag(FLAGS_outer_shard);
  if (shard != "on" && shard != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--outer-shard must be on or off, got '", shard, "'"));
  }
  if (shard == "on" && !o.enabled()) {
    return absl::InvalidArgumentError(
        "--outer-shard shards round sync's outer state: give --outer-every H > 0 too");
  }
  o.shard = shard == "on";
  RETURN_IF_ERROR(o.Validate());  // again: codec, overlap and shard are known now
  if (!o.enabled()) {
    if (codec != "none") {
      return absl::InvalidArgumentError(
          "--outer-compress applies to round sync only: give --outer-every H > 0 too");
    }
    return o;
  }
  // What cannot work with round sync, refused by train and plan alike.
  if (absl::GetFlag(FLAGS_zero) != 0) {
    return absl::InvalidArgumentError(
        "--outer-every does not work with --zero 1: each peer's inner steps need its own "
        "whole AdamW state, which --zero 1 shards over the ring");
  }
  const std::string compress = absl::GetFlag(FLAGS_compress);
  if (o.after == 0 && compress != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--outer-every exchanges once per round with --outer-compress; the per-step --compress ",
        compress, " does not apply (leave it at none, or switch later with --outer-after N)"));
  }
  if (o.after > 0 && compress != "none" && compress != "bf16") {
    // Preconditioned top-k (and auto) leave AdamW's momentum in their own units
    // (optim/adamw.h StepPreconditioned), which the inner steps' plain AdamW would
    // misread after the switch.
    return absl::InvalidArgumentError(absl::StrCat(
        "--outer-after: the per-step steps before the switch take --compress none or bf16, "
        "not --compress ",
        compress,
        " (top-k and auto keep AdamW's momentum in preconditioned units that round "
        "sync's inner steps cannot continue from)"));
  }
  if (absl::GetFlag(FLAGS_topk_refresh) != 0) {
    return absl::InvalidArgumentError(
        "--topk-refresh belongs to per-step preconditioned top-k, not to --outer-every");
  }
  return o;
}

absl::StatusOr<size_t> BucketBytesFromFlag() {
  const double mb = absl::GetFlag(FLAGS_bucket_mb);
  if (!(mb > 0) || mb > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--bucket-mb must be in (0, 4096], got %g", mb));
  }
  return static_cast<size_t>(mb * (1 << 20));
}

absl::StatusOr<std::string> ApplyCommFlags(train::RingReducerOptions* options) {
  const std::string compress = absl::GetFlag(FLAGS_compress);
  const int zstd_level = absl::GetFlag(FLAGS_zstd_level);
  const int probe_every = absl::GetFlag(FLAGS_probe_every);
  const double comm_budget = absl::GetFlag(FLAGS_comm_budget);
  const int topk_warmup_flag = absl::GetFlag(FLAGS_topk_warmup);
  if (topk_warmup_flag < -1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--topk-warmup must be >= 0 steps, or -1 (a tenth of --steps, at least 75), got %d",
        topk_warmup_flag));
  }
  const int topk_warmup = topk_warmup_flag >= 0
                              ? topk_warmup_flag
                              : std::max(kMinDefaultTopKWarmup, absl::GetFlag(FLAGS_steps) / 10);
  options->buckets.topk_warmup_steps = topk_warmup;
  const int topk_refresh = absl::GetFlag(FLAGS_topk_refresh);
  if (topk_refresh < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--topk-refresh must be >= 0 steps (0 = never), got %d", topk_refresh));
  }
  if (probe_every < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--probe-every must be >= 0 steps, or -1 (never), got %d", probe_every));
  }
  if (probe_every < 0 && compress == "auto") {
    return absl::InvalidArgumentError(
        "--compress auto needs link measurements: --probe-every -1 (never probe) is refused");
  }
  if (!std::isfinite(comm_budget) || comm_budget < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--comm-budget must be a fraction of the step time >= 0, got %g", comm_budget));
  }
  if (zstd_level < 0 || zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--zstd-level must be in [0, 19], got %d", zstd_level));
  }
  train::CommOptions& comm = options->comm;
  comm.probe_every = probe_every;
  comm.comm_budget = comm_budget;
  std::string codec;
  if (compress == "auto") {
    comm.auto_codec = true;
    // auto learns like fixed top-k (train/ring_gradient_reducer.h "auto's warm-up"):
    // no top-k before step W, the same density ramp after it, and from W on every
    // bucket preconditioned, whatever codec the planner gives it at each step.
    if (topk_warmup > 0) options->buckets.precondition_from = topk_warmup;
    comm.zstd_level = zstd_level > 0 ? zstd_level : 1;
    options->buckets.codec = collective::CodecSpec();
    codec = absl::StrFormat("auto zstd=%d", comm.zstd_level);
  } else {
    if (comm_budget > 0) {
      return absl::InvalidArgumentError("--comm-budget applies to --compress auto only");
    }
    absl::StatusOr<collective::CodecSpec> spec = collective::ParseCodecSpec(compress, zstd_level);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--compress: ", spec.status().message()));
    }
    comm.auto_codec = false;
    options->buckets.codec = *spec;
    // Preconditioned top-k needs the dense warm-up steps to measure AdamW's v.
    if (spec->kind == collective::CodecKind::kTopK && topk_warmup > 0) {
      options->buckets.precondition_from = topk_warmup;
    }
    codec = spec->ToString();
  }
  // Refresh steps exist only where top-k is preconditioned (they feed its frozen v).
  const bool preconditioned = options->buckets.precondition_from >= 0;
  if (topk_refresh > 0 && !preconditioned) {
    return absl::InvalidArgumentError(
        "--topk-refresh applies to preconditioned top-k only: --compress topk:D or auto "
        "with --topk-warmup > 0");
  }
  options->buckets.topk_refresh_every = topk_refresh;
  return absl::StrFormat(
      "%s probe_every=%d comm_budget=%g topk_warmup=%d%s%s", codec, probe_every, comm_budget,
      options->buckets.topk_warmup_steps, preconditioned ? " preconditioned" : "",
      topk_refresh > 0 ? absl::StrFormat(" topk_refresh=%d", topk_refresh) : std::string());
}

absl::StatusOr<net::RingSetup> RingSetupFromFlags(const std::string& cluster_id) {
  const double wait_s = absl::GetFlag(FLAGS_wait);
  if (!(wait_s > 0)) return absl::InvalidArgumentError("--wait must be positive seconds");
  net::RingSetup setup;
  setup.hosts_path = absl::GetFlag(FLAGS_hosts);
  setup.self = absl::GetFlag(FLAGS_self);
  setup.rank = absl::GetFlag(FLAGS_rank);
  setup.secret_file = absl::GetFlag(FLAGS_secret_file);
  setup.encrypt = absl::GetFlag(FLAGS_encrypt);
  setup.wait = absl::Seconds(wait_s);
  setup.cluster_id = cluster_id;
  return setup;
}

int ApplyThreadsFlag() {
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) threads = GetCpuFeatures().logical_cores;
  omp_set_num_threads(threads);
  return threads;
}

}  // namespace rt::cli
