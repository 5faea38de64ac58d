// `ringtrain export`: a checkpoint as a GGUF file (llama.cpp, ollama, LM Studio) or a
// Hugging Face model directory (safetensors + config). The writers live in
// src/export/; this file loads the checkpoint, parses flags and prints a summary.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/common_flags.h"
#include "cli/subcommand.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "export/gguf_export.h"
#include "export/hf_export.h"
#include "export/model_source.h"
#include "export/staged_output.h"
#include "train/train_checkpoint.h"

ABSL_FLAG(std::string, format, "",
          "export: gguf (one file for llama.cpp) or safetensors "
          "(a Hugging Face model directory)");
ABSL_FLAG(std::string, dtype, "",
          "export: f32, f16 or bf16 weights (default: f16 for gguf, f32 for safetensors)");
ABSL_FLAG(bool, force, false, "export: replace an existing --out (an earlier export only)");
ABSL_FLAG(std::string, name, "",
          "export: model name stored in the file (default ringtrain-ARCH-LAYERSxDIM-stepN)");

namespace rt::cli {
namespace {

int64_t FieldInt(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  int64_t v = 0;
  return it != fields.end() && absl::SimpleAtoi(it->second, &v) ? v : 0;
}

std::string FieldString(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

absl::Status Export() {
  const std::string ckpt = absl::GetFlag(FLAGS_ckpt), out = absl::GetFlag(FLAGS_out);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (ckpt.empty()) return absl::InvalidArgumentError("--ckpt DIR is required");
  if (out.empty()) return absl::InvalidArgumentError("--out PATH is required");
  if (format != "gguf" && format != "safetensors") {
    return absl::InvalidArgumentError(
        format.empty() ? "--format gguf|safetensors is required"
                       : absl::StrCat("--format '", format, "' is not gguf or safetensors"));
  }
  const bool gguf = format == "gguf";
  std::string dtype_name = absl::GetFlag(FLAGS_dtype);
  if (dtype_name.empty()) dtype_name = gguf ? "f16" : "f32";
  ASSIGN_OR_RETURN(exporter::ExportDtype dtype, exporter::ParseExportDtype(dtype_name));

  // The output is checked (and its staging entry made) before the model is loaded, so
  // a bad --out fails at once; on any later error the staging entry is removed.
  ASSIGN_OR_RETURN(
      exporter::StagedOutput staged,
      exporter::StagedOutput::Begin(
          out,
          gguf ? exporter::StagedOutput::Kind::kFile : exporter::StagedOutput::Kind::kDirectory,
          absl::GetFlag(FLAGS_force), exporter::HuggingFaceFileNames()));
  Stopwatch watch;
  ASSIGN_OR_RETURN(train::InferenceModel m, train::LoadInferenceModel(ckpt));

  exporter::ModelSource source;
  source.config = m.config;
  source.params = m.params.span();
  source.tokenizer_model = m.tokenizer_model;
  source.eot_id = m.eot_id;
  source.step = m.step;
  source.tokens_trained = m.step * FieldInt(m.fields, "train.slots") * m.config.seq_len;
  source.data_fingerprint = m.data_fingerprint;
  source.data_license = FieldString(m.fields, "data.license");
  source.name = absl::GetFlag(FLAGS_name);
  if (source.name.empty()) {
    source.name = absl::StrFormat("ringtrain-%s-%dx%d-step%d", model::ArchName(m.config.arch),
                                  m.config.n_layers, m.config.dim, m.step);
  }
  absl::StatusOr<exporter::PreparedModel> prepared = exporter::PrepareModel(source, dtype);
  if (!prepared.ok()) {
    return absl::Status(prepared.status().code(),
                        absl::StrCat("checkpoint ", m.path, ": ", prepared.status().message()));
  }
  for (const std::string& w : prepared->warnings) {
    std::fprintf(stderr, "ringtrain export: warning: %s\n", w.c_str());
  }
  if (gguf) {
    RETURN_IF_ERROR(exporter::WriteGgufModel(*prepared, dtype, staged.staging_path()));
  } else {
    RETURN_IF_ERROR(exporter::WriteHuggingFaceModel(*prepared, dtype, staged.staging_path()));
  }
  RETURN_IF_ERROR(staged.Commit());
  const double seconds = watch.ElapsedSeconds();

  uint64_t bytes = 0;
  if (gguf) {
    ASSIGN_OR_RETURN(bytes, exporter::FileBytes(staged.final_path()));
  } else {
    for (const std::string& f : exporter::HuggingFaceFileNames()) {
      ASSIGN_OR_RETURN(uint64_t b, exporter::FileBytes(staged.final_path() + "/" + f));
      bytes += b;
    }
  }
  std::printf("exported checkpoint %s (step %lld, %s)\n", m.path.c_str(),
              static_cast<long long>(m.step), m.config.ToString().c_str());
  const bool llama = m.config.arch == model::Arch::kLlama;
  const char* what = gguf    ? (llama ? "GGUF (llama.cpp llama)" : "GGUF (llama.cpp gpt2)")
                     : llama ? "Hugging Face LlamaForCausalLM (safetensors)"
                             : "Hugging Face GPT2LMHeadModel (safetensors)";
  std::printf("wrote %s: %s, %s weights, %.1f MB in %.1f s\n", staged.final_path().c_str(), what,
              exporter::ExportDtypeName(dtype), bytes / 1e6, seconds);
  return absl::OkStatus();
}

int RunExport(const std::vector<std::string>& positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "ringtrain export: unexpected argument '%s'\n", positional[0].c_str());
    return 2;
  }
  absl::Status s = Export();
  if (!s.ok()) {
    std::fprintf(stderr, "ringtrain export: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

const Subcommand& ExportSubcommand() {
  static const Subcommand sub{
      "export",
      "Write a checkpoint as GGUF (llama.cpp, ollama) or Hugging Face safetensors",
      "ringtrain export --ckpt DIR --out PATH --format gguf|safetensors [--dtype f32|f16|bf16]\n"
      "                 [--force] [--name NAME]\n"
      "DIR is a --ckpt-dir (its newest valid checkpoint is used) or one step directory.\n"
      "gguf: PATH is one file for llama.cpp's gpt2 (or, for --arch llama models, llama)\n"
      "architecture with the SentencePiece vocabulary (default f16). safetensors: PATH is a\n"
      "directory for transformers' GPT2LMHeadModel (LlamaForCausalLM): model.safetensors, "
      "config.json, generation_config.json,\n"
      "tokenizer.model, tokenizer_config.json, special_tokens_map.json, README.md\n"
      "(default f32). The output is written under a temporary name and renamed when\n"
      "complete; an existing PATH is kept unless --force.",
      {"ckpt", "out", "format", "dtype", "force", "name"},
      &RunExport};
  return sub;
}

}  // namespace rt::cli
