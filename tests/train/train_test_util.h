// Test helpers for the training layer: a temporary directory and synthetic data sets
// written with WriteTokenDataset, and a small TrainConfig.
#pragma once

#include <omp.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "data/token_dataset.h"
#include "temp_dir.h"
#include "train/train_config.h"

namespace rt::train::testing {

using ::rt::testing::TempDir;

// A first-order Markov chain over `vocab` ids: each id is followed by one of 3 fixed
// successors, so there is structure to learn but the loss cannot reach 0.
inline std::vector<uint32_t> MarkovTokens(size_t n, int vocab, uint64_t seed) {
  std::vector<uint32_t> out(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&s]() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  uint32_t cur = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = cur;
    uint32_t choice = static_cast<uint32_t>(next() % 3);
    cur = static_cast<uint32_t>((cur * 7 + 1 + choice * 5) % static_cast<uint32_t>(vocab));
  }
  return out;
}

// Writes a data dir with Markov train/val splits (source bytes = 4 bytes per token).
inline std::string WriteMarkovData(const std::string& dir, int vocab, size_t train_tokens,
                                   size_t val_tokens) {
  std::vector<uint32_t> train = MarkovTokens(train_tokens, vocab, 1);
  std::vector<uint32_t> val = MarkovTokens(val_tokens, vocab, 2);
  absl::Status s =
      data::WriteTokenDataset(dir, vocab, train, val, train.size() * 4, val.size() * 4);
  return s.ok() ? "" : std::string(s.message());
}

// Runs fn(rank) for rank in [0, n) on n threads (one peer each) and joins them.
inline void OnThreads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

// Tiny models run fastest on one thread, and two spinning OpenMP threads on a machine
// shared with other builds can be 30x slower. Results are deterministic per count.
inline void UseOneThread() { omp_set_num_threads(1); }

// A tiny model that trains in milliseconds per step.
inline TrainConfig TinyConfig(const std::string& data_dir) {
  TrainConfig c;
  c.data_dir = data_dir;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.model.dim = 32;
  c.model.seq_len = 16;
  c.batch = 4;
  c.accum = 1;
  c.lr = 3e-3f;
  c.min_lr = 3e-4f;
  c.warmup = 5;
  c.steps = 20;
  c.seed = 7;
  c.print_steps = false;
  // In-process rings here compare runs bit for bit; --balance on splits by measured
  // (timing-dependent) speed, which keeps runs equal only up to float summation order.
  // Tests of balancing turn it on.
  c.balance.enabled = false;
  return c;
}

}  // namespace rt::train::testing
