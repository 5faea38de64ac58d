// Which token windows each optimizer step trains on, and which peer trains on which.
//
// Deterministic and independent of the number of peers, so that a ring that loses or
// gains peers (or a run resumed from a checkpoint) keeps the same data order:
//   - an optimizer step t (0-based) trains on `slots` sequences (the global batch);
//   - slot s of step t is the window of T+1 tokens starting at
//       WindowStart(t, s) = Hash(seed, t, s) mapped onto [0, num_tokens - T - 1]
//     (a splitmix64-style hash, so the windows look uniformly random);
//   - the sequence's inputs are window[0, T) and its targets window[1, T+1);
//   - a peer of rank r among N peers takes slots r, r+N, r+2N, ... (shares may differ
//     by one when N does not divide `slots`).
// No state is kept: everything is a pure function of (seed, step, slot).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/token_dataset.h"

namespace rt::data {

class BatchSampler {
 public:
  // Errors (InvalidArgument): slots < 1, seq_len < 1, or fewer than seq_len + 1 tokens
  // (the message names the counts).
  static absl::StatusOr<BatchSampler> Create(uint64_t seed, int slots, int seq_len,
                                             uint64_t num_tokens);

  int slots() const { return slots_; }
  int seq_len() const { return seq_len_; }

  // First token of the window of slot `slot` (0 <= slot < slots) at step `step` (>= 0),
  // in [0, num_tokens - seq_len - 1].
  uint64_t WindowStart(int64_t step, int slot) const;

  // The slots of peer `rank` among `peers`: rank, rank + peers, ... (< slots).
  std::vector<int> SlotsOf(int rank, int peers) const;

 private:
  BatchSampler(uint64_t seed, int slots, int seq_len, uint64_t num_windows)
      : seed_(seed), slots_(slots), seq_len_(seq_len), num_windows_(num_windows) {}
  uint64_t seed_;
  int slots_, seq_len_;
  uint64_t num_windows_;  // number of valid window starts: num_tokens - seq_len
};

// Reads the windows starting at `starts` from `dataset`: tokens and targets are
// (starts.size(), seq_len) row-major; tokens[i] = window[0, T), targets[i] = window[1, T+1).
// Requires start + seq_len + 1 <= dataset.num_tokens() for every start.
void ReadWindows(const TokenDataset& dataset, const std::vector<uint64_t>& starts, int seq_len,
                 int32_t* tokens, int32_t* targets);

// `count` window starts spread evenly over a split of `num_tokens` tokens (a fixed
// evaluation set: the same windows at every evaluation and on every peer). Windows may
// overlap when count * (seq_len + 1) > num_tokens. Requires num_tokens >= seq_len + 1.
std::vector<uint64_t> EvenlySpacedWindows(uint64_t num_tokens, int seq_len, int count);

// splitmix64 finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace rt::data
