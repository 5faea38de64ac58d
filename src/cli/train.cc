// `ringtrain train`: flags -> TrainConfig -> [join the ring (--hosts)] -> Trainer::Run
// (src/train/trainer.h, src/train/ring_gradient_reducer.h).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "collective/codec_spec.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "data/token_dataset.h"
#include "model/param_layout.h"
#include "net/ring_setup.h"
#include "train/ring_gradient_reducer.h"
#include "train/trainer.h"

ABSL_FLAG(int, eval_every, 100, "Evaluate val loss and bits per byte every N steps (0 = never)");
ABSL_FLAG(int, eval_batches, 10, "Evaluation uses eval_batches * batch fixed val windows");
ABSL_FLAG(int, ckpt_every, 0, "Also checkpoint every N steps (0 = only at the end)");
ABSL_FLAG(int, ckpt_keep, 3, "Keep the newest N checkpoints (0 = all)");
ABSL_FLAG(bool, resume, false, "Continue from the newest valid checkpoint in --ckpt-dir");
ABSL_FLAG(int, check_every, 10,
          "With --hosts: compare every peer's param_hash every N steps, stop on a mismatch "
          "(0 = never)");

namespace rt::cli {
namespace {

// m.jsonl -> m.rank1.jsonl (other names: FILE -> FILE.rank1): every peer of a local
// ring gets the same arguments, so each needs its own file.
std::string PerPeerMetricsPath(const std::string& path, int rank) {
  if (absl::EndsWith(path, ".jsonl")) {
    return absl::StrCat(path.substr(0, path.size() - 6), ".rank", rank, ".jsonl");
  }
  return absl::StrCat(path, ".rank", rank);
}

std::string FileCrc(const std::string& path) {
  if (path.empty()) return "none";
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::StrFormat("%08x (%d bytes)", Crc32c(bytes.data(), bytes.size()), bytes.size());
}

// Joins the ring of --hosts with a fingerprint of everything every peer must agree
// on (the handshake refuses a peer that differs, naming the key), and wraps it in a
// RingGradientReducer. Data problems are reported here, before waiting for peers.
absl::StatusOr<std::unique_ptr<train::GradientReducer>> JoinTrainRing(const train::TrainConfig& c) {
  RETURN_IF_ERROR(c.Validate());
  absl::StatusOr<data::TokenDataset> opened = data::TokenDataset::Open(c.data_dir, "train");
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("--data ", c.data_dir, ": ", opened.status().message()));
  }
  const data::TokenDataset& train_data = *opened;
  model::GptConfig shape = c.model;
  shape.vocab_size = train_data.vocab_size();
  RETURN_IF_ERROR(shape.Validate());
  const model::ParamLayout layout(shape);

  const double bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  if (!(bucket_mb > 0)) return absl::InvalidArgumentError("--bucket-mb must be positive");
  ASSIGN_OR_RETURN(net::RingSetup setup, RingSetupFromFlags("ringtrain-train"));
  const int check_every = absl::GetFlag(FLAGS_check_every);
  if (check_every < 0) return absl::InvalidArgumentError("--check-every must be >= 0");
  absl::StatusOr<collective::CodecSpec> codec =
      collective::ParseCodecSpec(absl::GetFlag(FLAGS_compress), absl::GetFlag(FLAGS_zstd_level));
  if (!codec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--compress: ", codec.status().message()));
  }

  setup.fingerprint = {
      {"model", shape.ToString()},
      {"precision", model::PrecisionName(c.precision)},
      {"batch",
       absl::StrFormat("batch=%d accum=%d (sequences per peer per step)", c.batch, c.accum)},
      {"lr", absl::StrCat(c.lr)},
      {"min_lr", absl::StrCat(c.min_lr)},
      {"warmup", absl::StrCat(c.warmup)},
      {"weight_decay", absl::StrCat(c.adamw.weight_decay)},
      {"clip", absl::StrCat(c.clip)},
      {"adamw",
       absl::StrFormat("beta1=%g beta2=%g eps=%g", c.adamw.beta1, c.adamw.beta2, c.adamw.eps)},
      {"steps", absl::StrCat(c.steps)},
      {"seed", absl::StrCat(c.seed)},
      {"data", train_data.fingerprint()},
      {"tokenizer", FileCrc(train_data.tokenizer_path())},
      {"compress", codec->ToString()},
      {"bucket_mb", absl::StrCat(bucket_mb)},
      {"check_every", absl::StrCat(check_every)},
  };
  ASSIGN_OR_RETURN(std::unique_ptr<net::TcpRing> ring, net::JoinRing(setup));
  net::TcpRing* tcp = ring.get();
  LogInfo("ring formed: %d peers, this peer at position %d; compress %s, buckets of %g MB",
          ring->size(), ring->rank(), codec->ToString(), bucket_mb);

  train::RingReducerOptions options;
  options.buckets.bucket_bytes = static_cast<size_t>(bucket_mb * (1 << 20));
  options.buckets.codec = *codec;
  for (const model::TensorView& t : layout.tensors()) {
    if (!t.weight_decay) options.buckets.dense_ranges.push_back({t.offset, t.offset + t.count});
  }
  std::sort(options.buckets.dense_ranges.begin(), options.buckets.dense_ranges.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  options.check_every = check_every;
  return std::unique_ptr<train::GradientReducer>(std::make_unique<train::RingGradientReducer>(
      std::move(ring), options, [tcp] { return tcp->bytes_sent(); }));
}

int RunTrain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain train: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_hosts).empty()) {
    const char* ring_only = !absl::GetFlag(FLAGS_self).empty()          ? "--self"
                            : absl::GetFlag(FLAGS_rank) >= 0            ? "--rank"
                            : !absl::GetFlag(FLAGS_secret_file).empty() ? "--secret-file"
                            : absl::GetFlag(FLAGS_compress) != "none"   ? "--compress"
                                                                        : nullptr;
    if (ring_only != nullptr) {
      std::fprintf(stderr,
                   "ringtrain train: %s needs --hosts (a ring); without it train runs alone\n",
                   ring_only);
      return 2;
    }
  }
  train::TrainConfig c;
  c.data_dir = absl::GetFlag(FLAGS_data);
  c.model.n_layers = absl::GetFlag(FLAGS_layers);
  c.model.n_heads = absl::GetFlag(FLAGS_heads);
  c.model.dim = absl::GetFlag(FLAGS_dim);
  c.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  absl::StatusOr<model::Precision> precision =
      model::ParsePrecision(absl::GetFlag(FLAGS_precision));
  if (!precision.ok()) {
    std::fprintf(stderr, "ringtrain train: --precision: %s\n",
                 std::string(precision.status().message()).c_str());
    return 2;
  }
  c.precision = *precision;
  c.recompute = absl::GetFlag(FLAGS_recompute);
  c.batch = absl::GetFlag(FLAGS_batch);
  c.accum = absl::GetFlag(FLAGS_accum);
  c.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  c.min_lr = static_cast<float>(absl::GetFlag(FLAGS_min_lr));
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.adamw.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  c.clip = static_cast<float>(absl::GetFlag(FLAGS_clip));
  c.steps = absl::GetFlag(FLAGS_steps);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.eval_every = absl::GetFlag(FLAGS_eval_every);
  c.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  c.ckpt_dir = absl::GetFlag(FLAGS_ckpt_dir);
  c.ckpt_every = absl::GetFlag(FLAGS_ckpt_every);
  c.ckpt_keep = absl::GetFlag(FLAGS_ckpt_keep);
  c.resume = absl::GetFlag(FLAGS_resume);
  c.metrics_path = absl::GetFlag(FLAGS_metrics);

  const int threads = ApplyThreadsFlag();
  LogInfo("ringtrain train: %d threads", threads);
  absl::StatusOr<std::unique_ptr<train::GradientReducer>> reducer =
      absl::GetFlag(FLAGS_hosts).empty() ? std::unique_ptr<train::GradientReducer>()
                                         : JoinTrainRing(c);
  absl::Status status = reducer.status();
  if (status.ok()) {
    if (*reducer != nullptr && !c.metrics_path.empty()) {
      c.metrics_path = PerPeerMetricsPath(c.metrics_path, (*reducer)->rank());
      LogInfo("metrics of this peer go to %s", c.metrics_path);
    }
    absl::StatusOr<std::unique_ptr<train::Trainer>> trainer =
        train::Trainer::Create(c, std::move(*reducer));
    status = trainer.ok() ? (*trainer)->Run() : trainer.status();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "ringtrain train: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

std::vector<std::string> TrainFlagNames() {
  std::vector<std::string> names = ModelFlagNames();
  for (const std::string& n : OptimizerFlagNames()) names.push_back(n);
  for (const char* n : {"data", "ckpt_dir", "metrics", "eval_every", "eval_batches", "ckpt_every",
                        "ckpt_keep", "resume", "check_every"}) {
    names.push_back(n);
  }
  for (const std::string& n : RingFlagNames()) names.push_back(n);
  return names;
}

}  // namespace

const Subcommand& TrainSubcommand() {
  static const Subcommand sub{
      "train", "Train a GPT on prepared token shards (one peer, or a ring with --hosts)",
      "ringtrain train --data DIR [--layers 6 --heads 6 --dim 384 --seq-len 256] [--batch 8]\n"
      "                [--accum 1] [--steps 1000] [--lr 6e-4] [--ckpt-dir DIR [--resume]]\n"
      "                [--metrics FILE.jsonl] [--eval-every 100]\n"
      "                [--hosts FILE [--self HOST:PORT | --rank N] [--secret-file F] [--wait 120]\n"
      "                 [--compress none|bf16|topk:D] [--bucket-mb 25] [--check-every 10]]\n"
      "Prints one line per step (loss, learning rate, gradient norm, tokens/s, step time);\n"
      "with --eval-every, the validation loss and bits per byte. With --hosts, every peer\n"
      "trains on its share of each step and gradients are averaged over the ring; only\n"
      "rank 0 writes checkpoints; --metrics m.jsonl becomes m.rank<R>.jsonl per peer.",
      TrainFlagNames(), &RunTrain};
  return sub;
}

}  // namespace rt::cli
