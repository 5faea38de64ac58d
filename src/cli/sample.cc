// `ringtrain sample`: load the newest valid checkpoint and continue a prompt.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/status_macros.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/text_generator.h"
#include "train/train_checkpoint.h"

ABSL_FLAG(std::string, prompt, "", "Text to continue (empty: start from end-of-text)");
ABSL_FLAG(int, tokens, 200, "Tokens to generate");
ABSL_FLAG(double, temperature, 0.8, "Sampling temperature (0 = always the most likely token)");
ABSL_FLAG(int, top_k, 50, "Sample among the k most likely tokens (0 = all)");

namespace rt::cli {
namespace {

absl::Status Sample() {
  const std::string ckpt = absl::GetFlag(FLAGS_ckpt);
  if (ckpt.empty()) return absl::InvalidArgumentError("--ckpt DIR is required");
  train::SampleOptions options;
  options.max_new_tokens = absl::GetFlag(FLAGS_tokens);
  options.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  options.top_k = absl::GetFlag(FLAGS_top_k);
  options.seed = absl::GetFlag(FLAGS_seed);
  if (options.max_new_tokens < 0) return absl::InvalidArgumentError("--tokens must be >= 0");
  if (!(options.temperature >= 0)) return absl::InvalidArgumentError("--temperature must be >= 0");
  if (options.top_k < 0) return absl::InvalidArgumentError("--top-k must be >= 0");
  ASSIGN_OR_RETURN(model::Precision precision,
                   model::ParsePrecision(absl::GetFlag(FLAGS_precision)));

  ASSIGN_OR_RETURN(train::InferenceModel m, train::LoadInferenceModel(ckpt));
  if (m.tokenizer_model.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", m.path, " holds no tokenizer (was it trained on synthetic data?)"));
  }
  absl::StatusOr<data::Tokenizer> tokenizer = data::Tokenizer::FromSerialized(m.tokenizer_model);
  if (!tokenizer.ok()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", m.path, ": bad tokenizer.model: ", tokenizer.status().message()));
  }
  if (tokenizer->vocab_size() > m.config.vocab_size) {
    return absl::DataLossError(absl::StrCat("checkpoint ", m.path, ": tokenizer has ",
                                            tokenizer->vocab_size(), " ids, the model ",
                                            m.config.vocab_size));
  }
  model::GptOptions gpt_options;
  gpt_options.precision = precision;
  gpt_options.max_batch = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<model::Gpt> gpt, model::Gpt::Create(m.config, gpt_options));

  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  std::vector<int> ids = tokenizer->Encode(prompt);
  std::vector<int32_t> context(ids.begin(), ids.end());
  options.stop_id = tokenizer->eot_id();
  const int start_id = tokenizer->eot_id() >= 0 ? tokenizer->eot_id() : 0;
  std::vector<int32_t> out = train::Generate(*gpt, m.params.span(), context, start_id, options);
  std::vector<int> all(ids.begin(), ids.end());
  all.insert(all.end(), out.begin(), out.end());
  std::fprintf(stderr, "[checkpoint %s, step %lld, %s]\n", m.path.c_str(),
               static_cast<long long>(m.step), m.config.ToString().c_str());
  std::printf("%s\n", tokenizer->Decode(all).c_str());
  return absl::OkStatus();
}

int RunSample(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain sample: unexpected argument '%s' (quote the --prompt)\n",
                 positional[0].c_str());
    return 2;
  }
  ApplyThreadsFlag();
  absl::Status s = Sample();
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain sample: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

const Subcommand& SampleSubcommand() {
  static const Subcommand sub{
      "sample",
      "Continue a prompt with a trained model (newest valid checkpoint)",
      "ringtrain sample --ckpt DIR --prompt \"Xin chào\" [--tokens 200] [--temperature 0.8]\n"
      "                 [--top-k 50] [--seed N]\n"
      "DIR is a --ckpt-dir (its newest valid checkpoint is used) or one step directory.",
      {"ckpt", "prompt", "tokens", "temperature", "top_k", "seed", "precision", "threads"},
      &RunSample,
      /*flag_defaults=*/{},
      /*runs_openmp=*/true};
  return sub;
}

}  // namespace rt::cli
