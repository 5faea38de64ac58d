// The number formats an export may store weights in, and the conversion from the
// model's fp32 values into them (little-endian bytes, as GGUF and safetensors want).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rt::exporter {

enum class ExportDtype { kF32, kF16, kBf16 };

// "f32" | "f16" | "bf16"; the error names the bad value.
absl::StatusOr<ExportDtype> ParseExportDtype(absl::string_view s);
const char* ExportDtypeName(ExportDtype dtype);  // "f32" | "f16" | "bf16"
size_t BytesPerValue(ExportDtype dtype);         // 4 | 2 | 2

// IEEE 754 binary16, rounded to nearest even. Values of magnitude >= 65520 become
// infinity (callers check the range first: LargestMagnitude), NaN stays a NaN,
// values below the smallest subnormal (2^-24) become a signed zero.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);  // exact

// Largest |x| over `values` (NaN counts as infinity), to refuse f16 exports that
// would overflow.
float LargestMagnitude(absl::Span<const float> values);
inline constexpr float kLargestHalf = 65504.0f;

// Appends `values` encoded as `dtype` (bf16: core/bf16.h, round to nearest even).
void AppendEncoded(absl::Span<const float> values, ExportDtype dtype, std::string* out);

}  // namespace rt::exporter
