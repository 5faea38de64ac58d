// Block-scaled int8/int4 encoding with error feedback (see block_quant.h).
#include "collective/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"

namespace rt::collective {
namespace {

constexpr uint8_t kMagic[4] = {'R', 'T', 'Q', 'B'};
constexpr uint8_t kVersion = 1;

int MaxLevel(int bits) { return bits == 8 ? 127 : 7; }

size_t BlockBytes(size_t values, int bits) { return 4 + (bits == 8 ? values : (values + 1) / 2); }

void PutU32(uint8_t* p, uint32_t x) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(x >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t x = 0;
  for (int i = 0; i < 4; ++i) x |= static_cast<uint32_t>(p[i]) << (8 * i);
  return x;
}

}  // namespace

size_t QuantizedBytes(size_t count, int bits) {
  const size_t full = count / kQuantBlock, rest = count % kQuantBlock;
  return kQuantHeaderBytes + full * BlockBytes(kQuantBlock, bits) +
         (rest > 0 ? BlockBytes(rest, bits) : 0);
}

void EncodeQuantized(absl::Span<const float> v, int bits, absl::Span<float> residual,
                     std::vector<uint8_t>* out) {
  const size_t n = v.size();
  const int levels = MaxLevel(bits);
  out->assign(QuantizedBytes(n, bits), 0);
  uint8_t* p = out->data();
  std::memcpy(p, kMagic, 4);
  p[4] = kVersion;
  p[5] = static_cast<uint8_t>(bits);
  PutU32(p + 8, static_cast<uint32_t>(n));
  p += kQuantHeaderBytes;
  int8_t q[kQuantBlock];
  for (size_t b = 0; b < n; b += kQuantBlock) {
    const size_t m = std::min(kQuantBlock, n - b);
    float absmax = 0;
    for (size_t i = 0; i < m; ++i) absmax = std::max(absmax, std::fabs(v[b + i]));
    // Non-finite input has no scale: the block goes out as zeros and stays in the
    // residual (the trainer stops on a diverged loss before such values are exchanged).
    const float scale = std::isfinite(absmax) ? absmax / static_cast<float>(levels) : 0.0f;
    // A subnormal scale has no finite inverse (0 * inf would be NaN, and NaN cast to
    // int8 is undefined): such blocks divide by the scale instead.
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    const bool divide = !std::isfinite(inv);
    for (size_t i = 0; i < m; ++i) {
      float r = std::nearbyint(divide ? v[b + i] / scale : v[b + i] * inv);
      r = std::clamp(r, static_cast<float>(-levels), static_cast<float>(levels));
      q[i] = static_cast<int8_t>(r);
      if (!residual.empty()) residual[b + i] = v[b + i] - static_cast<float>(q[i]) * scale;
    }
    std::memcpy(p, &scale, 4);
    p += 4;
    if (bits == 8) {
      std::memcpy(p, q, m);
      p += m;
    } else {
      for (size_t i = 0; i < m; i += 2) {
        const uint8_t lo = static_cast<uint8_t>(q[i]) & 0x0f;
        const uint8_t hi = i + 1 < m ? static_cast<uint8_t>(q[i + 1]) & 0x0f : 0;
        *p++ = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

absl::Status DecodeQuantized(absl::Span<const uint8_t> bytes, int bits, size_t expected_count,
                             absl::Span<float> out) {
  if (bits != 8 && bits != 4) {
    return absl::InvalidArgumentError(absl::StrFormat("quantized: %d bits is not 8 or 4", bits));
  }
  if (out.size() != expected_count) {
    return absl::InvalidArgumentError("quantized: output size differs from the expected count");
  }
  if (bytes.size() < kQuantHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return absl::DataLossError("quantized message: bad magic or shorter than its header");
  }
  if (bytes[4] != kVersion) {
    return absl::DataLossError(
        absl::StrFormat("quantized message: version %d, expected %d", bytes[4], kVersion));
  }
  if (bytes[5] != bits || bytes[6] != 0 || bytes[7] != 0) {
    return absl::DataLossError(absl::StrFormat(
        "quantized message: %d bits, expected %d (or reserved bytes set)", bytes[5], bits));
  }
  const uint32_t count = GetU32(bytes.data() + 8);
  if (count != expected_count) {
    return absl::DataLossError(
        absl::StrFormat("quantized message: %u values, expected %u", count, expected_count));
  }
  if (bytes.size() != QuantizedBytes(count, bits)) {
    return absl::DataLossError(absl::StrFormat("quantized message: %d bytes, %d values need %d",
                                               bytes.size(), count, QuantizedBytes(count, bits)));
  }
  const int levels = MaxLevel(bits);
  const uint8_t* p = bytes.data() + kQuantHeaderBytes;
  for (size_t b = 0; b < count; b += kQuantBlock) {
    const size_t m = std::min<size_t>(kQuantBlock, count - b);
    float scale;
    std::memcpy(&scale, p, 4);
    p += 4;
    if (!std::isfinite(scale) || !(scale >= 0)) {
      return absl::DataLossError(
          absl::StrFormat("quantized message: block at %d has scale %g", b, scale));
    }
    for (size_t i = 0; i < m; ++i) {
      int q;
      if (bits == 8) {
        q = static_cast<int8_t>(p[i]);
      } else {
        const uint8_t nibble = (p[i / 2] >> (4 * (i % 2))) & 0x0f;
        q = nibble >= 8 ? static_cast<int>(nibble) - 16 : nibble;
      }
      if (q < -levels || q > levels) {
        return absl::DataLossError(absl::StrFormat(
            "quantized message: value %d at %d outside [-%d, %d]", q, b + i, levels, levels));
      }
      out[b + i] = static_cast<float>(q) * scale;
    }
    if (bits == 4 && m % 2 == 1 && (p[m / 2] >> 4) != 0) {
      return absl::DataLossError("quantized message: padding nibble is not zero");
    }
    p += bits == 8 ? m : (m + 1) / 2;
  }
  return absl::OkStatus();
}

}  // namespace rt::collective
