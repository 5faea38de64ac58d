// Window starts as a pure hash of (seed, step, slot); rank-strided slot ownership.
#include "data/batch_sampler.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_format.h"

namespace rt::data {

absl::StatusOr<BatchSampler> BatchSampler::Create(uint64_t seed, int slots, int seq_len,
                                                  uint64_t num_tokens) {
  if (slots < 1) return absl::InvalidArgumentError(absl::StrFormat("slots %d < 1", slots));
  if (seq_len < 1) return absl::InvalidArgumentError(absl::StrFormat("seq_len %d < 1", seq_len));
  if (num_tokens < static_cast<uint64_t>(seq_len) + 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the data has %u tokens, fewer than one window of seq_len + 1 = %d tokens",
                        num_tokens, seq_len + 1));
  }
  return BatchSampler(seed, slots, seq_len, num_tokens - static_cast<uint64_t>(seq_len));
}

uint64_t BatchSampler::WindowStart(int64_t step, int slot) const {
  // Chained mixing: each input passes through a full splitmix round, so neighbouring
  // steps or slots give unrelated windows.
  uint64_t h = SplitMix64(seed_ ^ 0x5245494E47545241ull);  // "RINGTRAI"
  h = SplitMix64(h ^ static_cast<uint64_t>(step));
  h = SplitMix64(h ^ static_cast<uint64_t>(slot));
  // Map to [0, num_windows) by the high half of a 128-bit product (bias < 2^-40 here).
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * num_windows_) >> 64);
}

std::vector<int> BatchSampler::SlotsOf(int rank, int peers) const {
  std::vector<int> out;
  if (peers < 1 || rank < 0 || rank >= peers) return out;
  for (int s = rank; s < slots_; s += peers) out.push_back(s);
  return out;
}

void ReadWindows(const TokenDataset& dataset, const std::vector<uint64_t>& starts, int seq_len,
                 int32_t* tokens, int32_t* targets) {
  const size_t T = static_cast<size_t>(seq_len);
  std::vector<int32_t> window(T + 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    dataset.Read(starts[i], T + 1, window.data());
    for (size_t j = 0; j < T; ++j) {
      tokens[i * T + j] = window[j];
      targets[i * T + j] = window[j + 1];
    }
  }
}

std::vector<uint64_t> EvenlySpacedWindows(uint64_t num_tokens, int seq_len, int count) {
  std::vector<uint64_t> out;
  const uint64_t T = static_cast<uint64_t>(seq_len);
  if (count < 1 || num_tokens < T + 1) return out;
  const uint64_t last_start = num_tokens - T - 1;
  for (int i = 0; i < count; ++i) {
    // i * last_start / (count - 1) spreads from 0 to last_start inclusive.
    uint64_t start = count == 1
                         ? 0
                         : static_cast<uint64_t>((static_cast<unsigned __int128>(i) * last_start) /
                                                 static_cast<unsigned>(count - 1));
    out.push_back(start);
  }
  return out;
}

}  // namespace rt::data
