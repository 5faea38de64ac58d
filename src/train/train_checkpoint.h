// What a training checkpoint holds and how the trainer, `eval` and `sample` read it.
//
// Sections (flat fp32 buffers in ParamLayout order, little-endian):
//   params, adam_m, adam_v         total_floats() floats each
//   outer_momentum                 round sync only (--outer-every): the outer Nesterov
//                                  momentum; checkpoints are written at round boundaries,
//                                  where the round-start copy equals params
//   tokenizer.model                the SentencePiece model of the data, if it had one
// Meta fields (strings): model.{vocab,layers,heads,dim,seq_len} (the shape), model.arch
//   (gpt2 when absent: older checkpoints) and for llama model.{rope_theta,ffn_dim,untied},
//   model.precision, optim.{lr,min_lr,warmup,weight_decay,clip,beta1,beta2,eps,steps},
//   train.{seed,batch,accum,slots}, data.fingerprint, data.eot_id, format "ringtrain-train-1",
//   and data.license when the data manifest records one (read by `export`).
// The manifest's `step` is the number of optimizer steps completed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_builder.h"
#include "core/aligned_buffer.h"
#include "model/gpt_config.h"
#include "train/train_config.h"

namespace rt::train {

inline constexpr char kTrainCheckpointFormat[] = "ringtrain-train-1";

// The meta fields of a checkpoint of this run (see the file comment).
std::map<std::string, std::string> TrainMetaFields(const TrainConfig& config,
                                                   const model::GptConfig& model, int slots,
                                                   const std::string& data_fingerprint, int eot_id,
                                                   const std::string& data_license = "");

// The model shape recorded in a checkpoint. DataLoss naming the checkpoint and the
// field if one is missing or not a number.
absl::StatusOr<model::GptConfig> ModelConfigFromMeta(const ckpt::Checkpoint& checkpoint);

// OK if `run` == `saved`; else FailedPrecondition naming every difference, e.g.
// "checkpoint .../step-00000100 has dim=384 heads=6, this run has dim=256 heads=4".
absl::Status CheckSameModel(const model::GptConfig& saved, const model::GptConfig& run,
                            const std::string& checkpoint_path);

// This run's learning-rate schedule (--lr, --min-lr, --warmup, --steps) against the
// one recorded in a checkpoint's meta `fields`: "" when they agree (or the checkpoint
// records none), else one line naming each change, old -> new, and the learning rate
// at `step` under both, e.g. "--steps 4 -> 8, --lr 0.003 -> 0.001: the learning rate
// at step 4 is 0.001 (the checkpoint's schedule gave 0.003)".
std::string DescribeScheduleChange(const std::map<std::string, std::string>& fields,
                                   const TrainConfig& run, int64_t step);

// Writes one checkpoint of a training run (WriteCheckpoint: atomic, checksummed).
absl::Status SaveTrainCheckpoint(const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta,
                                 absl::Span<const float> params, absl::Span<const float> adam_m,
                                 absl::Span<const float> adam_v, const std::string& tokenizer_model,
                                 int keep, absl::Span<const float> outer_momentum = {});

// The same checkpoint in two halves, for --zero 1 (no peer holds the whole moments):
// Begin adds the parameters (which must stay unchanged until Finish returns) and
// reserves adam_m and adam_v, whose pieces the caller writes as they arrive
// (CheckpointBuilder::WriteAt, byte offset = float offset * 4); Finish adds the
// tokenizer and publishes. Same files and manifest as SaveTrainCheckpoint.
absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>> BeginShardedTrainCheckpoint(
    const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta, absl::Span<const float> params);
// Round sync with the outer state sharded (--outer-shard on): the parameters and both
// AdamW moments whole (written by Commit, so they must stay unchanged until Finish
// returns) and outer_momentum reserved for its pieces; the same manifest as
// SaveTrainCheckpoint with an outer momentum.
absl::StatusOr<std::unique_ptr<ckpt::CheckpointBuilder>> BeginOuterShardedTrainCheckpoint(
    const std::string& ckpt_dir, const ckpt::CheckpointMeta& meta, absl::Span<const float> params,
    absl::Span<const float> adam_m, absl::Span<const float> adam_v);
absl::Status FinishTrainCheckpoint(ckpt::CheckpointBuilder* b, const std::string& tokenizer_model,
                                   int keep);

// Reads section `name` of `checkpoint` into `out`; error if its size is not out.size() floats.
absl::Status ReadFloatSection(const ckpt::Checkpoint& checkpoint, const std::string& name,
                              absl::Span<float> out);

// A model loaded for inference (`eval`, `sample`).
struct InferenceModel {
  std::string path;  // the checkpoint directory used
  int64_t step = 0;
  model::GptConfig config;
  model::Precision precision = model::Precision::kFp32;
  AlignedBuffer<float> params;
  std::string tokenizer_model;   // bytes of tokenizer.model, "" if none
  std::string data_fingerprint;  // "" if not recorded
  int eot_id = -1;
  std::map<std::string, std::string> fields;  // every meta field (see the file comment)
};

// Newest valid checkpoint under `ckpt` (a --ckpt-dir or one step directory). Every
// invalid checkpoint newer than the one used is logged as a warning ("skipping invalid
// checkpoint: step-00000020: params.bin truncated: ..."), as train does. Errors name
// the directory and, when checkpoints were skipped, why (each reason once).
absl::StatusOr<InferenceModel> LoadInferenceModel(const std::string& ckpt);

}  // namespace rt::train
