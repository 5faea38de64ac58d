// `ringtrain sample`: load the newest valid checkpoint and continue a prompt.
//
// For comparisons with other implementations of the model (llama.cpp, a numpy reader
// of an exported file) it can also take the prompt as token ids (--prompt-ids) and
// print everything as one JSON object (--json), with the logits each new id was
// drawn from (--logits). --temperature 0 is exact greedy decoding (train::Argmax).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "train/text_generator.h"
#include "train/train_checkpoint.h"

ABSL_FLAG(std::string, prompt, "", "Text to continue (empty: start from end-of-text)");
ABSL_FLAG(int, tokens, 200, "Tokens to generate");
ABSL_FLAG(double, temperature, 0.8, "Sampling temperature (0 = always the most likely token)");
ABSL_FLAG(int, top_k, 50, "Sample among the k most likely tokens (0 = all)");
ABSL_FLAG(std::string, prompt_ids, "",
          "The prompt as comma-separated token ids instead of --prompt text (e.g. 12,7,1033)");
ABSL_FLAG(bool, logits, false,
          "With --json: add \"logits\", for each new id the vocab floats it was drawn from "
          "(with --tokens 0: the prompt's next-token logits)");

namespace rt::cli {
namespace {

// "12, 7,1033" -> ids, each in [0, vocab).
absl::StatusOr<std::vector<int>> ParsePromptIds(const std::string& text, int vocab) {
  std::vector<int> ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: '", part, "' is not a token id (want e.g. 12,7,1033)"));
    }
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-ids: id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
    ids.push_back(id);
  }
  return ids;
}

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
  const bool json = absl::GetFlag(FLAGS_json), want_logits = absl::GetFlag(FLAGS_logits);
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::string prompt_ids = absl::GetFlag(FLAGS_prompt_ids);
  if (want_logits && !json) return absl::InvalidArgumentError("--logits needs --json");
  if (!prompt.empty() && !prompt_ids.empty()) {
    return absl::InvalidArgumentError("give --prompt or --prompt-ids, not both");
  }
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

  std::vector<int> ids;
  if (!prompt_ids.empty()) {
    ASSIGN_OR_RETURN(ids, ParsePromptIds(prompt_ids, m.config.vocab_size));
  } else {
    ids = tokenizer->Encode(prompt);
  }
  // An empty prompt starts from end-of-text, as a document does in the training data.
  if (ids.empty()) ids.push_back(tokenizer->eot_id() >= 0 ? tokenizer->eot_id() : 0);
  std::vector<int32_t> context(ids.begin(), ids.end());
  options.stop_id = tokenizer->eot_id();
  // --logits: what each new id was drawn from; with --tokens 0 what the next would be.
  std::vector<std::string> logits_json;
  auto keep_logits = [&](int32_t, absl::Span<const float> logits) {
    if (want_logits) logits_json.push_back(JsonFloatArray(logits));
  };
  std::vector<int32_t> out =
      train::Generate(*gpt, m.params.span(), context, 0, options, keep_logits);
  RETURN_IF_ERROR(gpt->status());
  if (want_logits && options.max_new_tokens == 0) {
    std::vector<float> logits(m.config.vocab_size);
    const int len = std::min<int>(m.config.seq_len, static_cast<int>(context.size()));
    gpt->LastLogits(m.params.span(), context.data() + context.size() - len, 1, len, logits.data());
    RETURN_IF_ERROR(gpt->status());
    logits_json.push_back(JsonFloatArray(logits));
  }
  std::vector<int> all(ids.begin(), ids.end());
  all.insert(all.end(), out.begin(), out.end());
  std::fprintf(stderr, "[checkpoint %s, step %lld, %s]\n", m.path.c_str(),
               static_cast<long long>(m.step), m.config.ToString().c_str());
  if (!json) {
    std::printf("%s\n", tokenizer->Decode(all).c_str());
    return absl::OkStatus();
  }
  std::string line =
      absl::StrCat("{\"checkpoint\":", JsonQuote(m.path), ",\"step\":", m.step,
                   ",\"precision\":", JsonQuote(model::PrecisionName(precision)),
                   ",\"prompt_ids\":", JsonIntArray(ids),
                   ",\"ids\":", JsonIntArray(std::vector<int>(out.begin(), out.end())),
                   ",\"text\":", JsonQuote(tokenizer->Decode(all)));
  if (want_logits) {
    absl::StrAppend(&line, ",\"logits\":[", absl::StrJoin(logits_json, ","), "]");
  }
  std::printf("%s}\n", line.c_str());
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
      "                 [--top-k 50] [--seed N] [--prompt-ids 12,7,1033] [--json [--logits]]\n"
      "DIR is a --ckpt-dir (its newest valid checkpoint is used) or one step directory.\n"
      "An empty prompt starts from the end-of-text token. --temperature 0 is greedy\n"
      "decoding: the most likely id each time, the lowest id on ties. --json prints one\n"
      "object: prompt_ids (what the model was given), ids (the new ids, ending with\n"
      "end-of-text if it was drawn), text (prompt and continuation), and with --logits\n"
      "logits: for each new id the logits it was drawn from (--tokens 0: one list, the\n"
      "prompt's next-token logits). The model sees at most seq_len ids: a longer context\n"
      "slides. --precision fp32 compares exactly with other fp32 implementations (auto\n"
      "may choose bf16 matmuls).",
      {"ckpt", "prompt", "prompt_ids", "tokens", "temperature", "top_k", "seed", "precision",
       "threads", "json", "logits"},
      &RunSample,
      /*flag_defaults=*/{},
      /*runs_openmp=*/true};
  return sub;
}

}  // namespace rt::cli
