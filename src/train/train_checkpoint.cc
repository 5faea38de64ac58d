// Training checkpoints: meta fields, model-shape checks, float sections.
#include "train/train_checkpoint.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "model/param_layout.h"
#include "optim/lr_schedule.h"

namespace rt::train {
namespace {

absl::Span<const uint8_t> Bytes(absl::Span<const float> x) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(x.data()),
                                   x.size() * sizeof(float));
}

absl::StatusOr<int> IntField(const ckpt::Checkpoint& checkpoint, const std::string& key) {
  auto it = checkpoint.meta().fields.find(key);
  int value = 0;
  if (it == checkpoint.meta().fields.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", checkpoint.path(),
                                            " has no valid integer field '", key,
                                            "' (not a ringtrain training checkpoint?)"));
  }
  return value;
}

std::string Field(const ckpt::Checkpoint& checkpoint, const std::string& key) {
  auto it = checkpoint.meta().fields.find(key);
  return it == checkpoint.meta().fields.end() ? "" : it->second;
}

}  // namespace

std::map<std::string, std::string> TrainMetaFields(const TrainConfig& config,
                                                   const model::GptConfig& model, int slots,
                                                   const std::string& data_fingerprint, int eot_id,
                                                   const std::string& data_license) {
  auto f = [](double x) { return absl::StrFormat("%.9g", x); };
  std::map<std::string, std::string> fields = {
      {"format", kTrainCheckpointFormat},
      {"model.vocab", absl::StrCat(model.vocab_size)},
      {"model.layers", absl::StrCat(model.n_layers)},
      {"model.heads", absl::StrCat(model.n_heads)},
      {"model.dim", absl::StrCat(model.dim)},
      {"model.seq_len", absl::StrCat(model.seq_len)},
      {"model.precision", model::PrecisionName(config.precision)},
      {"optim.lr", f(config.lr)},
      {"optim.min_lr", f(config.min_lr)},
      {"optim.warmup", absl::StrCat(config.warmup)},
      {"optim.weight_decay", f(config.adamw.weight_decay)},
      {"optim.clip", f(config.clip)},
      {"optim.beta1", f(config.adamw.beta1)},
      {"optim.beta2", f(config.adamw.beta2)},
      {"optim.eps", f(config.adamw.eps)},
      {"optim.steps", absl::StrCat(config.steps)},
      {"train.seed", absl::StrCat(config.seed)},
      {"train.batch", absl::StrCat(config.batch)},
      {"train.accum", absl::StrCat(config.accum)},
      {"train.slots", absl::StrCat(slots)},
      {"data.fingerprint", data_fingerprint},
      {"data.eot_id", absl::StrCat(eot_id)},
  };
  if (!data_license.empty()) fields["data.license"] = data_license;
  // The block design; checkpoints written before it existed have no model.arch and are gpt2.
  fields["model.arch"] = model::ArchName(model.arch);
  if (model.arch == model::Arch::kLlama) {
    fields["model.rope_theta"] = f(model.rope_theta);
    fields["model.ffn_dim"] = absl::StrCat(model.Hidden());
    fields["model.untied"] = model.untied ? "1" : "0";
  }
  return fields;
}

std::string DescribeScheduleChange(const std::map<std::string, std::string>& fields,
                                   const TrainConfig& run, int64_t step) {
  // The recorded schedule; a field that is absent or unreadable keeps this run's value
  // (then it is not named as a change).
  TrainConfig saved = run;
  std::vector<std::string> changes;
  auto number = [&](const char* key, const char* flag, auto* saved_value, auto run_value) {
    auto it = fields.find(key);
    double was = 0;
    if (it == fields.end() || !absl::SimpleAtod(it->second, &was)) return;
    using T = std::remove_pointer_t<decltype(saved_value)>;
    *saved_value = static_cast<T>(was);
    // Floats are recorded with %.9g, which reads back exactly.
    if (*saved_value != run_value) {
      changes.push_back(absl::StrCat(flag, " ", *saved_value, " -> ", run_value));
    }
  };
  number("optim.steps", "--steps", &saved.steps, run.steps);
  number("optim.warmup", "--warmup", &saved.warmup, run.warmup);
  number("optim.lr", "--lr", &saved.lr, run.lr);
  number("optim.min_lr", "--min-lr", &saved.min_lr, run.min_lr);
  if (changes.empty()) return "";
  const float lr_now = optim::CosineLr(step, run.warmup, run.steps, run.lr, run.min_lr);
  const float lr_was = optim::CosineLr(step, saved.warmup, saved.steps, saved.lr, saved.min_lr);
  return absl::StrFormat(
      "%s: the learning rate at step %d is %.3g (the checkpoint's schedule gave %.3g)",
      absl::StrJoin(changes, ", "), step, lr_now, lr_was);
}

absl::StatusOr<model::GptConfig> ModelConfigFromMeta(const ckpt::Checkpoint& checkpoint) {
  model::GptConfig c;
  ASSIGN_OR_RETURN(c.vocab_size, IntField(checkpoint, "model.vocab"));
  ASSIGN_OR_RETURN(c.n_layers, IntField(checkpoint, "model.layers"));
  ASSIGN_OR_RETURN(c.n_heads, IntField(checkpoint, "model.heads"));
  ASSIGN_OR_RETURN(c.dim, IntField(checkpoint, "model.dim"));
  ASSIGN_OR_RETURN(c.seq_len, IntField(checkpoint, "model.seq_len"));
  const std::string arch = Field(checkpoint, "model.arch");
  if (!arch.empty()) {
    absl::StatusOr<model::Arch> a = model::ParseArch(arch);
    if (!a.ok()) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", checkpoint.path(), " has an invalid model.arch: ", a.status().message()));
    }
    c.arch = *a;
  }
  if (c.arch == model::Arch::kLlama) {
    ASSIGN_OR_RETURN(c.ffn_dim, IntField(checkpoint, "model.ffn_dim"));
    ASSIGN_OR_RETURN(const int untied, IntField(checkpoint, "model.untied"));
    c.untied = untied != 0;
    double theta = 0;
    if (!absl::SimpleAtod(Field(checkpoint, "model.rope_theta"), &theta)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", checkpoint.path(), " has no valid model.rope_theta"));
    }
    c.rope_theta = static_cast<float>(theta);
  }
  absl::Status valid = c.Validate();
  if (!valid.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", checkpoint.path(), " has an invalid model: ", valid.message()));
  }
  return c;
}

absl::Status CheckSameModel(const model::GptConfig& saved, const model::GptConfig& run,
                            const std::string& checkpoint_path) {
  std::vector<std::string> was, now;
  auto compare = [&](const char* name, int a, int b) {
    if (a == b) return;
    was.push_back(absl::StrCat(name, "=", a));
    now.push_back(absl::StrCat(name, "=", b));
  };
  compare("vocab", saved.vocab_size, run.vocab_size);
  compare("layers", saved.n_layers, run.n_layers);
  compare("heads", saved.n_heads, run.n_heads);
  compare("dim", saved.dim, run.dim);
  compare("seq_len", saved.seq_len, run.seq_len);
  if (saved.arch != run.arch) {
    was.push_back(absl::StrCat("arch=", model::ArchName(saved.arch)));
    now.push_back(absl::StrCat("arch=", model::ArchName(run.arch)));
  } else if (saved.arch == model::Arch::kLlama) {
    compare("ffn_dim", saved.Hidden(), run.Hidden());
    compare("untied", saved.untied, run.untied);
    if (saved.rope_theta != run.rope_theta) {
      was.push_back(absl::StrCat("rope_theta=", saved.rope_theta));
      now.push_back(absl::StrCat("rope_theta=", run.rope_theta));
    }
  }
  if (was.empty()) return absl::OkStatus();
  std::string hint;
  if (run.seq_len > saved.seq_len && saved.arch == model::Arch::kGpt2) {
    hint = absl::StrFormat(" (seq_len %d is longer than the checkpoint's position table of %d)",
                           run.seq_len, saved.seq_len);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("checkpoint ", checkpoint_path, " is a different model: it has ",
                   absl::StrJoin(was, " "), ", this run has ", absl::StrJoin(now, " "), hint));
}

namespace {
absl::Span<const uint8_t> StringBytes(const std::string& s) {
  return absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
}  // namespace

absl::Status SaveTrainCheckpoint(const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta,
                                 absl::Span<const float> params, absl::Span<const float> adam_m,
                                 absl::Span<const float> adam_v, const std::string& tokenizer_model,
                                 int keep, absl::Span<const float> outer_momentum) {
  std::vector<ckpt::SectionRef> sections = {
      {"params", Bytes(params)}, {"adam_m", Bytes(adam_m)}, {"adam_v", Bytes(adam_v)}};
  if (!outer_momentum.empty()) sections.push_back({"outer_momentum", Bytes(outer_momentum)});
  if (!tokenizer_model.empty())
    sections.push_back({"tokenizer.model", StringBytes(tokenizer_model)});
  return ckpt::WriteCheckpoint(ckpt_dir, meta, sections, keep);
}

absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>> BeginShardedTrainCheckpoint(
    const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta, absl::Span<const float> params) {
  ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointBuilder> b,
                   ckpt::CheckpointBuilder::Begin(ckpt_dir, meta));
  // The sections in SaveTrainCheckpoint's order: both modes write the same manifest.
  RETURN_IF_ERROR(b->Add("params", Bytes(params)));
  RETURN_IF_ERROR(b->Reserve("adam_m", params.size() * sizeof(float)));
  RETURN_IF_ERROR(b->Reserve("adam_v", params.size() * sizeof(float)));
  return b;
}

absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>> BeginOuterShardedTrainCheckpoint(
    const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta, absl::Span<const float> params,
    absl::Span<const float> adam_m, absl::Span<const float> adam_v) {
  ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointBuilder> b,
                   ckpt::CheckpointBuilder::Begin(ckpt_dir, meta));
  RETURN_IF_ERROR(b->Add("params", Bytes(params)));
  RETURN_IF_ERROR(b->Add("adam_m", Bytes(adam_m)));
  RETURN_IF_ERROR(b->Add("adam_v", Bytes(adam_v)));
  RETURN_IF_ERROR(b->Reserve("outer_momentum", params.size() * sizeof(float)));
  return b;
}

absl::Status FinishTrainCheckpoint(ckpt::CheckpointBuilder* b, const std::string& tokenizer_model,
                                   int keep) {
  if (!tokenizer_model.empty())
    RETURN_IF_ERROR(b->Add("tokenizer.model", StringBytes(tokenizer_model)));
  return b->Commit(keep);
}

absl::Status ReadFloatSection(const ckpt::Checkpoint& checkpoint, const std::string& name,
                              absl::Span<float> out) {
  if (!checkpoint.HasSection(name)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", checkpoint.path(), " has no section '", name, "'"));
  }
  if (checkpoint.SectionBytes(name) != out.size() * sizeof(float)) {
    return absl::DataLossError(absl::StrFormat(
        "checkpoint %s: section '%s' has %u bytes, the model needs %u", checkpoint.path(), name,
        checkpoint.SectionBytes(name), out.size() * sizeof(float)));
  }
  return checkpoint.ReadSection(name, absl::Span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()),
                                                          out.size() * sizeof(float)));
}

absl::StatusOr<InferenceModel> LoadInferenceModel(const std::string& ckpt) {
  std::vector<std::string> problems;
  absl::StatusOr<ckpt::Checkpoint> checkpoint = ckpt::OpenLatestValidCheckpoint(ckpt, &problems);
  if (!checkpoint.ok()) {
    // The error already describes one problem (a damaged step directory given
    // directly, or the last one met): add only the others, so none is said twice.
    std::vector<std::string> others;
    for (const std::string& p : problems) {
      if (!absl::StrContains(checkpoint.status().message(), p)) others.push_back(p);
    }
    std::string why = others.empty() ? "" : absl::StrCat("; also ", absl::StrJoin(others, "; "));
    return absl::Status(checkpoint.status().code(),
                        absl::StrCat(checkpoint.status().message(), why));
  }
  // Like train: every newer checkpoint skipped for being invalid is reported.
  for (const std::string& p : problems) LogWarning("skipping invalid checkpoint: %s", p);
  InferenceModel m;
  m.path = checkpoint->path();
  m.step = checkpoint->meta().step;
  ASSIGN_OR_RETURN(m.config, ModelConfigFromMeta(*checkpoint));
  std::string precision = Field(*checkpoint, "model.precision");
  absl::StatusOr<model::Precision> p =
      model::ParsePrecision(precision.empty() ? "fp32" : precision);
  if (p.ok()) m.precision = *p;
  model::ParamLayout layout(m.config);
  m.params.Resize(layout.total_floats());
  RETURN_IF_ERROR(ReadFloatSection(*checkpoint, "params", m.params.span()));
  if (checkpoint->HasSection("tokenizer.model")) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, checkpoint->ReadSectionBytes("tokenizer.model"));
    m.tokenizer_model.assign(bytes.begin(), bytes.end());
  }
  m.data_fingerprint = Field(*checkpoint, "data.fingerprint");
  m.fields = checkpoint->meta().fields;
  int eot = -1;
  if (absl::SimpleAtoi(Field(*checkpoint, "data.eot_id"), &eot)) m.eot_id = eot;
  return m;
}

}  // namespace rt::train
