// GptConfig validation and printing; precision names.
#include "model/gpt_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cpu_features.h"
#include "model/matmul.h"

namespace rt::model {

absl::StatusOr<Precision> ParsePrecision(absl::string_view s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "auto") {
    // Native bf16 only (AMX implies AVX512-BF16); RINGTRAIN_ISA below avx512bf16 means
    // this peer should behave like a CPU without it, so fp32. oneDNN must run it natively
    // too: under ONEDNN_MAX_CPU_ISA=AVX512_CORE it emulates bf16 at a fraction of fp32.
    return ActiveIsa() >= Isa::kAvx512Bf16 && OneDnnHasNativeBf16() ? Precision::kBf16
                                                                    : Precision::kFp32;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", s, "' (expected fp32, bf16 or auto)"));
}

const char* PrecisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

absl::StatusOr<Arch> ParseArch(absl::string_view s) {
  if (s == "gpt2") return Arch::kGpt2;
  if (s == "llama") return Arch::kLlama;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown arch '", s, "' (expected gpt2 or llama)"));
}

const char* ArchName(Arch a) { return a == Arch::kLlama ? "llama" : "gpt2"; }

int DefaultFfnDim(int dim) {
  const int64_t f = (int64_t{8} * dim + 2) / 3;  // ceil(8/3 * dim)
  return static_cast<int>((f + 63) / 64 * 64);
}

int GptConfig::Hidden() const {
  if (arch == Arch::kGpt2) return 4 * dim;
  return ffn_dim > 0 ? ffn_dim : DefaultFfnDim(dim);
}

absl::Status GptConfig::Validate() const {
  struct Field {
    const char* name;
    int value;
  };
  for (const Field& f : {Field{"vocab", vocab_size}, Field{"layers", n_layers},
                         Field{"heads", n_heads}, Field{"dim", dim}, Field{"seq_len", seq_len}}) {
    if (f.value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model %s must be positive, got %d", f.name, f.value));
    }
  }
  if (dim % n_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dim %d is not divisible by heads %d", dim, n_heads));
  }
  if (arch == Arch::kGpt2) {
    if (ffn_dim != 0 || untied || rope_theta != 10000.0f) {
      return absl::InvalidArgumentError(
          "ffn_dim, untied and rope_theta apply to arch llama only (gpt2's MLP is 4*dim, its "
          "LM head is wte, its positions are learned)");
    }
  } else {
    // RoPE turns pairs of channels (i, i + hs/2) of every head.
    if ((dim / n_heads) % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "arch llama needs an even head size for rotary embeddings: dim %d / heads %d = %d", dim,
          n_heads, dim / n_heads));
    }
    if (ffn_dim < 0 || ffn_dim > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ffn_dim must be in [1, 1048576] (0 = default), got %d", ffn_dim));
    }
    if (!(rope_theta > 1.0f) || !std::isfinite(rope_theta)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rope_theta must be a finite number above 1, got %g", rope_theta));
    }
  }
  // Keeps every index below 2^31 inside kernels that use int offsets per row.
  constexpr int64_t kMaxRowFloats = int64_t{1} << 28;
  if (static_cast<int64_t>(vocab_size) * dim >= kMaxRowFloats * 8 ||
      static_cast<int64_t>(seq_len) * seq_len >= kMaxRowFloats || dim > (1 << 20) ||
      static_cast<int64_t>(Hidden()) * dim >= kMaxRowFloats * 8) {
    return absl::InvalidArgumentError(absl::StrCat("model too large: ", ToString()));
  }
  return absl::OkStatus();
}

std::string GptConfig::ToString() const {
  std::string s = absl::StrFormat("layers=%d heads=%d dim=%d seq_len=%d vocab=%d", n_layers,
                                  n_heads, dim, seq_len, vocab_size);
  if (arch == Arch::kLlama) {
    absl::StrAppendFormat(&s, " arch=llama ffn=%d rope_theta=%g %s", Hidden(), rope_theta,
                          untied ? "untied" : "tied");
  }
  return s;
}

bool GptConfig::operator==(const GptConfig& o) const {
  return vocab_size == o.vocab_size && n_layers == o.n_layers && n_heads == o.n_heads &&
         dim == o.dim && seq_len == o.seq_len && arch == o.arch && rope_theta == o.rope_theta &&
         Hidden() == o.Hidden() && untied == o.untied;
}

}  // namespace rt::model
