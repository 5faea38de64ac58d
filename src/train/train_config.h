// TrainConfig: everything one training run needs, filled from flags by the CLI
// (src/cli/train.cc) or directly by tests.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/gpt_config.h"
#include "optim/adamw.h"

namespace rt::train {

struct TrainConfig {
  std::string data_dir;  // `ringtrain prepare` output (train and val splits)

  // Model shape; model.vocab_size is taken from the data (0 here = use the data's).
  model::GptConfig model;
  model::Precision precision = model::Precision::kFp32;
  bool recompute = false;

  int batch = 8;  // sequences per peer per micro-step
  int accum = 1;  // micro-steps per optimizer step (per peer)

  // Optimizer: AdamW + linear warm-up + cosine decay to min_lr, global-norm clip.
  float lr = 6e-4f, min_lr = 6e-5f;
  int warmup = 100;
  optim::AdamWConfig adamw;  // weight_decay lives here
  float clip = 1.0f;         // 0 = off
  int steps = 1000;          // optimizer steps of the whole run (the schedule's length)
  uint64_t seed = 1337;      // parameter init and data order

  int eval_every = 0;     // evaluate val loss every N steps and at the end (0 = never)
  int eval_batches = 20;  // fixed val windows per evaluation: eval_batches * batch

  std::string ckpt_dir;  // "" = no checkpoints
  int ckpt_every = 0;    // also checkpoint every N steps (0 = only at the end)
  int ckpt_keep = 3;     // newest checkpoints kept (0 = all)
  bool resume = false;   // continue from the newest valid checkpoint in ckpt_dir

  std::string metrics_path;  // JSONL, "" = none
  bool print_steps = true;   // human step lines on stdout

  // Checks the values that do not depend on the data; the error names the flag.
  absl::Status Validate() const;
};

}  // namespace rt::train
