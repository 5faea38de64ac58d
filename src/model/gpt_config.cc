// GptConfig validation and printing; precision names.
#include "model/gpt_config.h"

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
  // Keeps every index below 2^31 inside kernels that use int offsets per row.
  constexpr int64_t kMaxRowFloats = int64_t{1} << 28;
  if (static_cast<int64_t>(vocab_size) * dim >= kMaxRowFloats * 8 ||
      static_cast<int64_t>(seq_len) * seq_len >= kMaxRowFloats || dim > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("model too large: ", ToString()));
  }
  return absl::OkStatus();
}

std::string GptConfig::ToString() const {
  return absl::StrFormat("layers=%d heads=%d dim=%d seq_len=%d vocab=%d", n_layers, n_heads, dim,
                         seq_len, vocab_size);
}

bool GptConfig::operator==(const GptConfig& o) const {
  return vocab_size == o.vocab_size && n_layers == o.n_layers && n_heads == o.n_heads &&
         dim == o.dim && seq_len == o.seq_len;
}

}  // namespace rt::model
