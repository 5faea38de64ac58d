// `ringtrain train`: flags -> TrainConfig -> Trainer::Run (src/train/trainer.h).
#include <cstdio>

#include "absl/flags/flag.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/log.h"
#include "train/trainer.h"

ABSL_FLAG(int, eval_every, 100, "Evaluate val loss and bits per byte every N steps (0 = never)");
ABSL_FLAG(int, eval_batches, 10, "Evaluation uses eval_batches * batch fixed val windows");
ABSL_FLAG(int, ckpt_every, 0, "Also checkpoint every N steps (0 = only at the end)");
ABSL_FLAG(int, ckpt_keep, 3, "Keep the newest N checkpoints (0 = all)");
ABSL_FLAG(bool, resume, false, "Continue from the newest valid checkpoint in --ckpt-dir");

namespace rt::cli {
namespace {

int RunTrain(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain train: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
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
  absl::StatusOr<std::unique_ptr<train::Trainer>> trainer = train::Trainer::Create(c);
  absl::Status status = trainer.ok() ? (*trainer)->Run() : trainer.status();
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
                        "ckpt_keep", "resume"}) {
    names.push_back(n);
  }
  return names;
}

}  // namespace

const Subcommand& TrainSubcommand() {
  static const Subcommand sub{
      "train", "Train a GPT on prepared token shards (one peer; a ring with --hosts later)",
      "ringtrain train --data DIR [--layers 6 --heads 6 --dim 384 --seq-len 256] [--batch 8]\n"
      "                [--accum 1] [--steps 1000] [--lr 6e-4] [--ckpt-dir DIR [--resume]]\n"
      "                [--metrics FILE.jsonl] [--eval-every 100]\n"
      "Prints one line per step (loss, learning rate, gradient norm, tokens/s, step time);\n"
      "with --eval-every, the validation loss and bits per byte.",
      TrainFlagNames(), &RunTrain};
  return sub;
}

}  // namespace rt::cli
