// `ringtrain eval`: validation loss, perplexity and bits per byte of a checkpoint.
#include <cmath>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "data/token_dataset.h"
#include "model/gpt.h"
#include "train/evaluator.h"
#include "train/train_checkpoint.h"

ABSL_FLAG(int64_t, eval_tokens, 0, "Evaluate at most this many val tokens (0 = the whole split)");

namespace rt::cli {
namespace {

absl::Status Eval() {
  const std::string ckpt = absl::GetFlag(FLAGS_ckpt), data_dir = absl::GetFlag(FLAGS_data);
  if (ckpt.empty()) return absl::InvalidArgumentError("--ckpt DIR is required");
  if (data_dir.empty()) return absl::InvalidArgumentError("--data DIR is required");
  const int64_t eval_tokens = absl::GetFlag(FLAGS_eval_tokens);
  const int batch = absl::GetFlag(FLAGS_batch);
  if (eval_tokens < 0) return absl::InvalidArgumentError("--eval-tokens must be >= 0");
  if (batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  ASSIGN_OR_RETURN(model::Precision precision,
                   model::ParsePrecision(absl::GetFlag(FLAGS_precision)));

  ASSIGN_OR_RETURN(train::InferenceModel m, train::LoadInferenceModel(ckpt));
  absl::StatusOr<data::TokenDataset> val = data::TokenDataset::Open(data_dir, "val");
  if (!val.ok()) {
    return absl::Status(val.status().code(),
                        absl::StrCat("--data ", data_dir, ": ", val.status().message()));
  }
  if (val->vocab_size() != m.config.vocab_size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoint %s has vocab %d, the data %s has vocab %d: they do not belong together", m.path,
        m.config.vocab_size, data_dir, val->vocab_size()));
  }
  if (!m.data_fingerprint.empty() && m.data_fingerprint != val->fingerprint()) {
    LogWarning("checkpoint %s was trained on other data (fingerprint %s, %s has %s)", m.path,
               m.data_fingerprint, data_dir, val->fingerprint());
  }
  const int T = m.config.seq_len;
  std::vector<uint64_t> windows =
      train::ContiguousWindows(val->num_tokens(), T, static_cast<uint64_t>(eval_tokens));
  if (windows.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the val split of %s has %u tokens, fewer than one window of seq_len + 1 = %d", data_dir,
        val->num_tokens(), T + 1));
  }
  model::GptOptions options;
  options.precision = precision;
  options.max_batch = batch;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Gpt> gpt, model::Gpt::Create(m.config, options));
  Stopwatch watch;
  train::EvalResult r = train::EvaluateWindows(*gpt, m.params.span(), *val, windows);
  RETURN_IF_ERROR(gpt->status());
  const double seconds = watch.ElapsedSeconds();

  std::printf("checkpoint   %s (step %lld, %s)\n", m.path.c_str(), static_cast<long long>(m.step),
              m.config.ToString().c_str());
  std::printf("val tokens   %lld of %llu (%.1f s, %.0f tokens/s)\n",
              static_cast<long long>(r.tokens), static_cast<unsigned long long>(val->num_tokens()),
              seconds, r.tokens / std::max(seconds, 1e-9));
  std::printf("val_loss     %.4f nats/token\n", r.loss);
  std::printf("perplexity   %.2f\n", std::exp(r.loss));
  if (std::isfinite(r.bpb)) {
    std::printf("val_bpb      %.4f bits per byte\n", r.bpb);
  } else {
    std::printf("val_bpb      n/a (the data records no source bytes)\n");
  }
  std::printf(
      "{\"step\":%lld,\"val_loss\":%.6f,\"perplexity\":%.6g,\"val_bpb\":%s,\"tokens\":%lld}\n",
      static_cast<long long>(m.step), r.loss, std::exp(r.loss),
      std::isfinite(r.bpb) ? absl::StrFormat("%.6f", r.bpb).c_str() : "null",
      static_cast<long long>(r.tokens));
  return absl::OkStatus();
}

int RunEval(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain eval: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  ApplyThreadsFlag();
  absl::Status s = Eval();
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain eval: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

const Subcommand& EvalSubcommand() {
  static const Subcommand sub{
      "eval",
      "Validation loss, perplexity and bits per byte of a checkpoint",
      "ringtrain eval --ckpt DIR --data DIR [--eval-tokens N] [--batch 8]\n"
      "Evaluates non-overlapping seq_len windows of the val split; bits per byte =\n"
      "loss / ln 2 * tokens / source bytes (comparable across tokenizers).",
      {"ckpt", "data", "eval_tokens", "batch", "precision", "threads"},
      &RunEval,
      /*flag_defaults=*/{},
      /*runs_openmp=*/true};
  return sub;
}

}  // namespace rt::cli
