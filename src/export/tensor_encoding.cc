// fp32 -> f32/f16/bf16 little-endian bytes (see header). x86-64 is little-endian, so
// the values are copied as they lie in memory.
#include "export/tensor_encoding.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"

namespace rt::exporter {

absl::StatusOr<ExportDtype> ParseExportDtype(absl::string_view s) {
  if (s == "f32") return ExportDtype::kF32;
  if (s == "f16") return ExportDtype::kF16;
  if (s == "bf16") return ExportDtype::kBf16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype '", s, "' is not one of f32, f16, bf16"));
}

const char* ExportDtypeName(ExportDtype dtype) {
  switch (dtype) {
    case ExportDtype::kF32:
      return "f32";
    case ExportDtype::kF16:
      return "f16";
    case ExportDtype::kBf16:
      return "bf16";
  }
  return "?";
}

size_t BytesPerValue(ExportDtype dtype) { return dtype == ExportDtype::kF32 ? 4 : 2; }

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN -> quiet NaN
  // 65520 = halfway between the largest half (65504) and 65536: from there on (ties
  // to even: 65504 has an odd mantissa) the result is infinity.
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  const uint32_t exponent = abs >> 23;  // biased by 127
  if (exponent < 113) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24, i.e. the
    // 24-bit significand shifted right by (126 - exponent) bits, rounded to even.
    const uint32_t shift = 126 - exponent;
    if (shift > 24) return sign;
    const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
    uint32_t q = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = ((exponent - 112) << 10) | ((abs & 0x7fffffu) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves the exponent up
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  uint32_t x;
  std::memcpy(&x, &magnitude, 4);
  x |= sign;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

float LargestMagnitude(absl::Span<const float> values) {
  float largest = 0.0f;
  for (float v : values) {
    const float a = std::isnan(v) ? INFINITY : std::fabs(v);
    if (a > largest) largest = a;
  }
  return largest;
}

void AppendEncoded(absl::Span<const float> values, ExportDtype dtype, std::string* out) {
  const size_t begin = out->size();
  out->resize(begin + values.size() * BytesPerValue(dtype));
  char* p = out->data() + begin;
  switch (dtype) {
    case ExportDtype::kF32:
      std::memcpy(p, values.data(), values.size() * 4);
      return;
    case ExportDtype::kF16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = FloatToHalf(values[i]);
        std::memcpy(p + 2 * i, &h, 2);
      }
      return;
    case ExportDtype::kBf16:
      for (size_t i = 0; i < values.size(); ++i) {
        const bf16_t b = FloatToBf16(values[i]);
        std::memcpy(p + 2 * i, &b, 2);
      }
      return;
  }
}

}  // namespace rt::exporter
