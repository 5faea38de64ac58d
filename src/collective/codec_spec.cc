// Codec spec parsing and the top-k density schedule.
#include "collective/codec_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rt::collective {

std::string CodecSpec::ToString() const {
  switch (kind) {
    case CodecKind::kNone:
      return "none";
    case CodecKind::kBf16:
      return "bf16";
    case CodecKind::kInt8:
      return "int8";
    case CodecKind::kInt4:
      return "int4";
    case CodecKind::kTopK:
      return zstd_level > 0 ? absl::StrFormat("topk:%g+zstd%d", density, zstd_level)
                            : absl::StrFormat("topk:%g", density);
  }
  return "?";
}

absl::StatusOr<CodecSpec> ParseCodecSpec(absl::string_view text, int zstd_level) {
  if (zstd_level < 0 || zstd_level > 19) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--zstd-level %d is out of range (0 = off, 1..19)", zstd_level));
  }
  CodecSpec spec;
  spec.zstd_level = zstd_level;
  if (text == "none") return spec;
  if (text == "bf16") {
    spec.kind = CodecKind::kBf16;
    return spec;
  }
  if (text == "int8" || text == "int4") {
    spec.kind = text == "int8" ? CodecKind::kInt8 : CodecKind::kInt4;
    return spec;
  }
  if (text == "auto") {
    return absl::InvalidArgumentError(
        "--compress auto must be resolved to a codec per bucket by the caller");
  }
  constexpr absl::string_view kTopK = "topk:";
  if (text.substr(0, kTopK.size()) == kTopK) {
    double density = 0;
    if (!absl::SimpleAtod(text.substr(kTopK.size()), &density) || !std::isfinite(density) ||
        density <= 0 || density > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--compress '", text, "': the top-k density must be a number in (0, 1], e.g. topk:0.01"));
    }
    spec.kind = CodecKind::kTopK;
    spec.density = density;
    return spec;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--compress '", text, "' is not one of none, bf16, int8, int4, topk:DENSITY, auto"));
}

double TopKDensityAt(int64_t step, double density, int64_t warmup_steps) {
  if (warmup_steps <= 0 || step >= 2 * warmup_steps) return density;
  if (step < warmup_steps) return 1.0;
  const double progress =
      static_cast<double>(step - warmup_steps + 1) / static_cast<double>(warmup_steps + 1);
  return std::pow(density, progress);
}

bool IsTopKRefreshStep(int64_t step, int64_t warmup_steps, int64_t refresh_every) {
  if (warmup_steps <= 0 || refresh_every <= 0 || step < 2 * warmup_steps) return false;
  return (step - 2 * warmup_steps + 1) % refresh_every == 0;
}

}  // namespace rt::collective
