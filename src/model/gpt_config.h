// GptConfig: the shape of a GPT-2 model, and the matmul precision choice.
//
// The config is plain data; Validate() is the one place that decides which shapes
// are legal, so every entry point (flags, checkpoints, data) gets the same message.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::model {

// The epsilon of every LayerNorm: y = (x - mean) / sqrt(var + eps) * w + b (GPT-2's).
// Exporters write it into the files other implementations read.
inline constexpr float kLayerNormEpsilon = 1e-5f;

// Matmul input precision. Accumulation, outputs, master weights and optimizer state
// are always fp32; kBf16 only rounds matmul inputs to bfloat16.
enum class Precision { kFp32, kBf16 };

// "fp32" | "bf16" | "auto" (auto = bf16 iff the CPU has AVX-512-BF16 or AMX and oneDNN,
// perhaps capped, runs bf16 natively; see OneDnnHasNativeBf16()).
// The error names the bad value.
absl::StatusOr<Precision> ParsePrecision(absl::string_view s);
const char* PrecisionName(Precision p);  // "fp32" | "bf16"

struct GptConfig {  // GPT-2 shape
  int vocab_size = 0, n_layers = 0, n_heads = 0, dim = 0;
  int seq_len = 0;  // size of the position table = longest sequence the model can see
  // OK, or InvalidArgument naming the problem, e.g. "dim 100 is not divisible by heads 3".
  absl::Status Validate() const;
  std::string ToString() const;  // "layers=6 heads=6 dim=384 seq_len=256 vocab=8192"
  bool operator==(const GptConfig& o) const;
  bool operator!=(const GptConfig& o) const { return !(*this == o); }
};

}  // namespace rt::model
