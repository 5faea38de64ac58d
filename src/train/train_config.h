// TrainConfig: everything one training run needs, filled from flags by the CLI
// (src/cli/train.cc) or directly by tests.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "model/gpt_config.h"
#include "optim/adamw.h"
#include "sync/round_sync.h"
#include "train/slot_balancer.h"

namespace rt::train {

struct TrainConfig {
  std::string data_dir;  // `ringtrain prepare` output (train and val splits)

  // Model shape; model.vocab_size is taken from the data (0 here = use the data's).
  model::GptConfig model;
  model::Precision precision = model::Precision::kFp32;
  bool recompute = false;

  int batch = 8;  // sequences per peer per micro-step
  int accum = 1;  // micro-steps per optimizer step (per peer) when global_batch is 0
  // Sequences per optimizer step over all peers (--global-batch); the peers of a view
  // share them out, each in micro-steps of `batch`, so the data order and the update
  // do not depend on how many peers train. 0 = batch * accum * peers of the reducer.
  int global_batch = 0;

  // Load balancing (--balance on|off, --max-skew; train/slot_balancer.h): shares of
  // the global batch follow each peer's measured speed. Must be equal on every peer.
  BalanceOptions balance;

  // Round sync (--outer-every H > 0; sync/round_sync.h): H inner steps per peer without
  // communication, then an outer step on the token-weighted pseudo-gradients. Equal on
  // every peer. every = 0: per-step gradient sync. round.after = N > 0 (--outer-after):
  // per-step sync for the first N steps, then round sync (below --steps).
  sync::RoundSyncOptions round;

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
  // Also checkpoint once this many minutes have passed since the last checkpoint (or
  // the start) on any peer: the peers vote in the step's exact sum, so all agree on
  // the step. 0 = off.
  double ckpt_minutes = 0;
  int ckpt_keep = 3;  // --keep: newest checkpoints kept (0 = all)
  // Continue from the newest valid checkpoint in ckpt_dir, if there is one (the CLI
  // default); false refuses a ckpt_dir that already holds a checkpoint.
  bool resume = false;

  std::string metrics_path;  // JSONL, "" = none
  bool print_steps = true;   // human step lines on stdout

  // Checks the values that do not depend on the data; the error names the flag.
  absl::Status Validate() const;
};

}  // namespace rt::train
