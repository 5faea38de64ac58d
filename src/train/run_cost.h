// What a run costs (`ringtrain plan --train-tokens --price-per-hour --gpu-prices`
// item 5): time, tokens per day and money of training N tokens on the planned ring, and
// The same run on GPUs rented by the hour, from a user-editable price file.
//
// The price file (tools/gpu-prices.txt is an example): one offer per line,
//   NAME  PRICE_PER_HOUR  tflops=ACHIEVED | tokens_per_s=MEASURED  [# note]
// with '#' comments and blank lines. ACHIEVED is the training TFLOP/s the GPU really
// reaches (peak x MFU), so that a GPU's tokens/s = ACHIEVED / (FLOPs per token of the
// planned model); tokens_per_s is a measured throughput for this very shape. Errors
// name FILE:LINE.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::train {

struct GpuOffer {
  std::string name;
  double price_per_hour = 0;  // per GPU, in the file's currency
  double tflops = 0;          // achieved training TFLOP/s (0 when tokens_per_s is given)
  double tokens_per_s = 0;    // measured for the shape (0 when tflops is given)
  std::string note;           // the line's comment (source, date)
};

// `path` only names the file in errors.
absl::StatusOr<std::vector<GpuOffer>> ParseGpuPrices(absl::string_view text,
                                                     absl::string_view path);

// "2000000000", "2e9", "2G", "2B" (= 1e9), "500M", "300K": a positive token count.
absl::StatusOr<double> ParseTokenCount(absl::string_view text);

struct RunCost {
  double seconds = 0;
  double tokens_per_day = 0;
  double cost = 0;  // price_per_hour x units x hours
};

// Training `tokens` at `tokens_per_s` on `units` machines (peers or GPUs) that cost
// `price_per_hour` each (0 = no price: cost 0).
RunCost PriceRun(double tokens, double tokens_per_s, int units, double price_per_hour);

// A GPU offer's tokens/s for a model of `flops_per_token` training FLOPs per token.
double GpuTokensPerSecond(const GpuOffer& offer, double flops_per_token);

}  // namespace rt::train
