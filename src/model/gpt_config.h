// GptConfig: the shape of a GPT model (GPT-2 or Llama-style), and the matmul precision choice.
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
// The epsilon of every RMSNorm of a llama model: y = x / sqrt(mean(x^2) + eps) * w
// (written to GGUF as llama.attention.layer_norm_rms_epsilon, to config.json as rms_norm_eps).
inline constexpr float kRmsNormEpsilon = 1e-5f;

// The block design.
//   kGpt2:  LayerNorm with bias, learned positions (wpe), GELU MLP of 4C, biases on every
//           linear layer, LM head tied to wte.
//   kLlama: RMSNorm without bias, rotary position embeddings on q and k (half-split
//           pairs (i, i + hs/2), Hugging Face's convention), SwiGLU MLP of hidden F,
//           no biases, LM head tied to wte unless untied.
enum class Arch { kGpt2, kLlama };
// "gpt2" | "llama"; the error names the bad value.
absl::StatusOr<Arch> ParseArch(absl::string_view s);
const char* ArchName(Arch a);

// SwiGLU hidden size when none is given: 8/3 * dim rounded up to a multiple of 64 (the
// three matrices then hold about as many weights as GPT-2's two of 4C).
int DefaultFfnDim(int dim);

// Matmul input precision. Accumulation, outputs, master weights and optimizer state
// are always fp32; kBf16 only rounds matmul inputs to bfloat16.
enum class Precision { kFp32, kBf16 };

// "fp32" | "bf16" | "auto" (auto = bf16 iff the CPU has AVX-512-BF16 or AMX and oneDNN,
// perhaps capped, runs bf16 natively; see OneDnnHasNativeBf16()).
// The error names the bad value.
absl::StatusOr<Precision> ParsePrecision(absl::string_view s);
const char* PrecisionName(Precision p);  // "fp32" | "bf16"

struct GptConfig {
  int vocab_size = 0, n_layers = 0, n_heads = 0, dim = 0;
  int seq_len = 0;  // longest sequence the model sees (gpt2: size of the position table)
  Arch arch = Arch::kGpt2;
  // llama only (Validate refuses other values on gpt2):
  float rope_theta = 10000.0f;  // RoPE base: pair i turns by t * theta^(-2i/hs)
  int ffn_dim = 0;              // SwiGLU hidden size F; 0 = DefaultFfnDim(dim)
  bool untied = false;          // a separate LM head (V,C) instead of wte
  // OK, or InvalidArgument naming the problem, e.g. "dim 100 is not divisible by heads 3".
  absl::Status Validate() const;
  // "layers=6 heads=6 dim=384 seq_len=256 vocab=8192" (gpt2), plus
  // " arch=llama ffn=1024 rope_theta=10000 tied" for llama.
  std::string ToString() const;
  // The MLP's hidden width: 4C (gpt2) or F (llama, ffn_dim resolved).
  int Hidden() const;
  bool operator==(const GptConfig& o) const;
  bool operator!=(const GptConfig& o) const { return !(*this == o); }
};

}  // namespace rt::model
