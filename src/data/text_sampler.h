// A bounded, deterministic random sample of input lines for tokenizer training.
//
// Every valid, non-blank line (or segment of an over-long line) gets a pseudo-random
// key hash(seed, line number in the whole input); the sample is the lines with the
// smallest keys whose total size fits `budget_bytes` (a bottom-k sample, kept in a
// max-heap). So memory is bounded by the budget whatever the input size, every line has
// the same chance, and the same input and seed give the same sample.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/text_input.h"

namespace rt::data {

struct TextSample {
  std::vector<std::string> lines;  // in input order
  uint64_t bytes = 0;
  uint64_t lines_seen = 0;  // valid lines in the whole input
};

// `progress` (optional) is called now and then with (disk bytes done, disk bytes total).
absl::StatusOr<TextSample> SampleLines(
    const std::vector<InputFile>& files, uint64_t budget_bytes, uint64_t seed,
    const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace rt::data
