// bfloat16 <-> float conversion (scalar). bf16 keeps float's 8 exponent bits and
// the top 7 mantissa bits; we round to nearest even, and keep NaN a NaN.
// Vectorised bulk conversions live with the kernels that need them.
#pragma once

#include <cstdint>
#include <cstring>

namespace rt {

using bf16_t = uint16_t;

inline bf16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>((u + rounding_bias) >> 16);
}

inline float Bf16ToFloat(bf16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace rt
