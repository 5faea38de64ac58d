// `ringtrain prepare`: raw UTF-8 text (.txt / .zst files or directories) -> a data
// directory of token shards, a SentencePiece tokenizer and a manifest (the work is in
// src/data/prepare_pipeline.h; this file parses flags and prints progress and a summary).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/cpu_features.h"
#include "data/data_manifest.h"
#include "data/prepare_pipeline.h"

ABSL_FLAG(std::vector<std::string>, input, {},
          "Input files or directories (comma-separated; more may follow as arguments). "
          "Directories are searched recursively for *.txt and *.zst");
ABSL_FLAG(std::string, license, "",
          "Licence of the input text, recorded in the data manifest and carried into "
          "checkpoints and exported models (e.g. \"CC BY-SA 4.0\")");
ABSL_FLAG(int, vocab_size, 32000, "Vocabulary size of the tokenizer to train");
ABSL_FLAG(double, val_fraction, 0.005, "Fraction of documents that go to the val split");
ABSL_FLAG(std::string, tokenizer, "",
          "Use this SentencePiece .model instead of training one (copied into --out)");
ABSL_FLAG(int64_t, shard_tokens, 100000000, "Tokens per shard file (the last one may be smaller)");
ABSL_FLAG(
    double, sample_mb, 64,
    "Megabytes of randomly sampled lines to train the tokenizer on (bounds its time and memory)");
ABSL_FLAG(
    bool, compare_spm, false,
    "After preparing, time single-thread SentencePiece encoding of the same text (benchmark)");

namespace rt::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Progress: a bar redrawn in place on a terminal, else one plain line every 10 s.
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void Update(const data::PrepareProgress& p) {
    const auto now = Clock::now();
    if (phase_ != p.phase) {
      Finish();
      phase_ = p.phase;
      phase_start_ = now;
      last_ = now - std::chrono::seconds(60);
    }
    const double interval = tty_ ? 0.2 : 10.0;
    if (std::chrono::duration<double>(now - last_).count() < interval) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - phase_start_).count();
    const double mb = p.done_bytes / 1e6, total_mb = p.total_bytes / 1e6;
    const double rate = secs > 0.5 ? mb / secs : 0;
    const double frac = p.total_bytes > 0 ? static_cast<double>(p.done_bytes) / p.total_bytes : 1;
    // Rate and ETA are unknown until half a second of the phase and some bytes have
    // passed: the first line of a phase shows neither (not "0.00 MB/s, ETA 0 s").
    const bool measured = rate > 0;
    const double eta = measured ? (total_mb - mb) / rate : 0;
    // Percent and ETA follow the input files (compressed bytes for .zst); the rate is
    // of text when the phase reports it.
    const double text_mb = p.text_bytes / 1e6;
    const double text_rate = secs > 0.5 ? text_mb / secs : 0;
    std::string amount = absl::StrFormat("%.1f/%.1f MB input", mb, total_mb);
    if (p.text_bytes > 0) {
      amount += absl::StrFormat(", %.1f MB text", text_mb);
      if (text_rate > 0) amount += absl::StrFormat(" %.2f MB/s", text_rate);
    } else if (measured) {
      amount += absl::StrFormat(" %.2f MB/s", rate);
    }
    if (tty_) {
      constexpr int kWidth = 30;
      int filled = static_cast<int>(frac * kWidth);
      std::string bar(filled, '=');
      if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
      const std::string eta_text = measured ? absl::StrFormat("%d:%02d", static_cast<int>(eta) / 60,
                                                              static_cast<int>(eta) % 60)
                                            : std::string("-:--");
      std::fprintf(stderr, "\r%-9s [%s] %5.1f%% %s ETA %s ", phase_.c_str(), bar.c_str(),
                   100 * frac, amount.c_str(), eta_text.c_str());
      drawn_ = true;
    } else if (measured) {
      std::fprintf(stderr, "prepare: %s %.1f%% (%s, ETA %.0f s)\n", phase_.c_str(), 100 * frac,
                   amount.c_str(), eta);
    } else {
      std::fprintf(stderr, "prepare: %s %.1f%% (%s)\n", phase_.c_str(), 100 * frac, amount.c_str());
    }
  }
  void Finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  std::string phase_;
  Clock::time_point phase_start_, last_;
};

int RunPrepareCommand(const std::vector<std::string>& positional) {
  data::PrepareOptions o;
  o.inputs = absl::GetFlag(FLAGS_input);
  o.inputs.insert(o.inputs.end(), positional.begin(), positional.end());
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  o.val_fraction = absl::GetFlag(FLAGS_val_fraction);
  o.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  o.license = absl::GetFlag(FLAGS_license);
  if (!o.license.empty()) {
    absl::Status valid = data::CheckLicenseText(o.license);
    if (!valid.ok()) {
      std::fprintf(stderr, "ringtrain prepare: --license: %s\n",
                   std::string(valid.message()).c_str());
      return 2;
    }
  }
  const int64_t shard_tokens = absl::GetFlag(FLAGS_shard_tokens);
  const double sample_mb = absl::GetFlag(FLAGS_sample_mb);
  if (shard_tokens <= 0) {
    std::fprintf(stderr, "ringtrain prepare: --shard-tokens must be positive (got %lld)\n",
                 static_cast<long long>(shard_tokens));
    return 2;
  }
  if (!(sample_mb > 0)) {
    std::fprintf(stderr, "ringtrain prepare: --sample-mb must be positive\n");
    return 2;
  }
  if (o.vocab_size < 300 || o.vocab_size > 1 << 24) {
    std::fprintf(stderr, "ringtrain prepare: --vocab-size %d is outside [300, 16777216]\n",
                 o.vocab_size);
    return 2;
  }
  o.shard_tokens = static_cast<uint64_t>(shard_tokens);
  o.sample_bytes = static_cast<uint64_t>(sample_mb * 1e6);
  int threads = absl::GetFlag(FLAGS_threads);
  o.threads = threads > 0 ? threads : GetCpuFeatures().logical_cores;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.compare_spm = absl::GetFlag(FLAGS_compare_spm);
  ProgressPrinter printer;
  o.progress = [&](const data::PrepareProgress& p) { printer.Update(p); };

  absl::StatusOr<data::PrepareSummary> s = data::RunPrepare(o);
  printer.Finish();
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain prepare: %s\n", std::string(s.status().message()).c_str());
    return 1;
  }
  const data::ReadStats& r = s->read;
  for (const std::string& e : r.invalid_examples) std::fprintf(stderr, "warning: %s\n", e.c_str());
  if (r.invalid_lines > r.invalid_examples.size()) {
    std::fprintf(stderr, "warning: ... %llu invalid UTF-8 lines skipped in total\n",
                 static_cast<unsigned long long>(r.invalid_lines));
  }
  for (const std::string& e : r.empty_examples) {
    std::fprintf(stderr, "warning: %s holds no valid text\n", e.c_str());
  }
  if (o.val_fraction > 0 && s->val_tokens == 0) {
    std::fprintf(stderr, "warning: the val split is empty (%llu documents; raise --val-fraction)\n",
                 static_cast<unsigned long long>(r.documents));
  }
  const uint64_t bytes = s->train_bytes + s->val_bytes;
  const uint64_t tokens = s->train_tokens + s->val_tokens;
  std::printf("prepared %s\n", o.out_dir.c_str());
  std::printf(
      "  input       %llu files, %llu documents, %llu lines, %.1f MB of text, %llu invalid lines "
      "skipped\n",
      static_cast<unsigned long long>(r.files), static_cast<unsigned long long>(r.documents),
      static_cast<unsigned long long>(r.lines), r.text_bytes / 1e6,
      static_cast<unsigned long long>(r.invalid_lines));
  if (s->trained_tokenizer) {
    std::printf("  tokenizer   trained BPE, vocab %d, on %.1f MB sample (%llu lines) in %.1f s\n",
                s->vocab_size, s->sample_bytes / 1e6,
                static_cast<unsigned long long>(s->sample_lines), s->tokenizer_seconds);
    // SentencePiece stops merging when the sample has no more pairs to merge: say so,
    // the model's vocabulary (and the checkpoint's shape) follows the real size.
    if (s->vocab_size < o.vocab_size) {
      std::printf(
          "              (--vocab-size %d asked for more pieces than this %.1f MB sample "
          "yields: the vocabulary is %d)\n",
          o.vocab_size, s->sample_bytes / 1e6, s->vocab_size);
    }
  } else {
    std::printf("  tokenizer   %s, vocab %d\n", o.tokenizer_path.c_str(), s->vocab_size);
  }
  std::printf("  train       %llu tokens, %llu documents, %.1f MB\n",
              static_cast<unsigned long long>(s->train_tokens),
              static_cast<unsigned long long>(s->train_documents), s->train_bytes / 1e6);
  std::printf("  val         %llu tokens, %llu documents, %.1f MB\n",
              static_cast<unsigned long long>(s->val_tokens),
              static_cast<unsigned long long>(s->val_documents), s->val_bytes / 1e6);
  std::printf("  shards      %llu (%d-byte tokens), tokens per byte %.4f\n",
              static_cast<unsigned long long>(s->shards), s->token_bytes,
              bytes ? static_cast<double>(tokens) / bytes : 0.0);
  std::printf(
      "  encoding    %.1f s, %.2f MB/s with %d threads (%.1f CPU s, %.2f MB per CPU s); "
      "total %.1f s\n",
      s->encode_seconds, s->encode_seconds > 0 ? bytes / 1e6 / s->encode_seconds : 0.0, s->threads,
      s->encode_cpu_seconds, s->encode_cpu_seconds > 0 ? bytes / 1e6 / s->encode_cpu_seconds : 0.0,
      s->total_seconds);
  if (o.compare_spm && s->spm_encode_seconds > 0) {
    const double spm = s->spm_bytes / 1e6 / s->spm_encode_seconds;
    const double ours = s->encode_seconds > 0 ? bytes / 1e6 / s->encode_seconds : 0.0;
    std::printf(
        "  compare     SentencePiece Encode alone, 1 thread: %.2f MB/s (%.2f MB per CPU s); "
        "prepare: %.2f MB/s = %.0f%% of %d x single-thread\n",
        spm, s->spm_encode_cpu_seconds > 0 ? s->spm_bytes / 1e6 / s->spm_encode_cpu_seconds : 0.0,
        ours, 100 * ours / (spm * s->threads), s->threads);
  }
  return 0;
}

}  // namespace

const Subcommand& PrepareSubcommand() {
  static const Subcommand sub{
      "prepare",
      "Tokenize raw text (.txt/.zst files or directories) into a training data directory",
      "ringtrain prepare --input PATH... --out DIR [--vocab-size 32000] [--val-fraction 0.005]\n"
      "                  [--tokenizer FILE.model] [--shard-tokens N] [--sample-mb 64] [--threads "
      "N]\n"
      "                  [--license \"CC BY-SA 4.0\"]\n"
      "Documents are separated by blank lines. Without --tokenizer a SentencePiece BPE model\n"
      "(byte fallback, exact round trip) is trained on a random sample and written to DIR.",
      {"input", "out", "vocab_size", "val_fraction", "tokenizer", "license", "shard_tokens",
       "sample_mb", "compare_spm", "threads", "seed"},
      &RunPrepareCommand};
  return sub;
}

}  // namespace rt::cli
