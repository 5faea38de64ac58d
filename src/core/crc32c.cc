// CRC32C implementation: SSE4.2 path (interleaved streams) with a portable table fallback.
//
// The crc32 instruction has a latency of ~3 cycles but a throughput of one per cycle,
// so one dependent chain runs at a third of the possible speed. The SSE4.2 path splits
// a block into three equal lanes, runs three independent chains, and joins them: the
// CRC register is linear over GF(2), so crc(A|B) = Shift(crc(A), |B|) ^ crc0(B), where
// Shift appends |B| zero bytes; for the two fixed lane lengths it is four table
// lookups (tables built once from the "append one zero byte" matrix).
#include "core/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

#include "core/cpu_features.h"

namespace rt {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial
constexpr size_t kLongLane = 8192;       // bytes per lane for big inputs
constexpr size_t kShortLane = 256;       // bytes per lane for the tail
constexpr int kLanes = 3;                // independent crc32 chains (4-6 measured no faster)

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = MakeTable();
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

// A linear operator on 32-bit CRC registers: column i is the image of bit i.
using Gf2Matrix = std::array<uint32_t, 32>;

uint32_t Apply(const Gf2Matrix& m, uint32_t v) {
  uint32_t out = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) out ^= m[i];
  }
  return out;
}

Gf2Matrix Multiply(const Gf2Matrix& a, const Gf2Matrix& b) {  // a after b
  Gf2Matrix out{};
  for (int i = 0; i < 32; ++i) out[i] = Apply(a, b[i]);
  return out;
}

// Operator that appends `bytes` zero bytes to a raw (non-inverted) CRC register.
Gf2Matrix ZerosOperator(size_t bytes) {
  Gf2Matrix one_byte{};
  for (int i = 0; i < 32; ++i) {
    uint32_t v = 1u << i;
    for (int k = 0; k < 8; ++k) v = (v & 1) ? (v >> 1) ^ kPoly : v >> 1;
    one_byte[i] = v;
  }
  Gf2Matrix result{};
  for (int i = 0; i < 32; ++i) result[i] = 1u << i;  // identity
  Gf2Matrix power = one_byte;
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = Multiply(power, result);
    power = Multiply(power, power);
  }
  return result;
}

// Shift tables: Shift(crc) = t[0][crc & 0xff] ^ t[1][crc >> 8 & 0xff] ^ ...
struct ShiftTable {
  uint32_t t[4][256];
  explicit ShiftTable(size_t bytes) {
    Gf2Matrix op = ZerosOperator(bytes);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t n = 0; n < 256; ++n) t[k][n] = Apply(op, n << (8 * k));
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xff] ^ t[1][(crc >> 8) & 0xff] ^ t[2][(crc >> 16) & 0xff] ^ t[3][crc >> 24];
  }
};

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// kLanes interleaved chains over lanes of `lane` bytes; returns the joined register.
__attribute__((target("sse4.2"))) inline uint64_t InterleavedLanes(uint64_t c0, const uint8_t* p,
                                                                   size_t lane,
                                                                   const ShiftTable& shift) {
  uint64_t c[kLanes] = {c0};
  for (size_t i = 0; i < lane; i += 8) {
    for (int k = 0; k < kLanes; ++k) c[k] = _mm_crc32_u64(c[k], Load64(p + k * lane + i));
  }
  uint32_t joined = static_cast<uint32_t>(c[0]);
  for (int k = 1; k < kLanes; ++k) joined = shift.Shift(joined) ^ static_cast<uint32_t>(c[k]);
  return joined;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  static const ShiftTable long_shift(kLongLane);
  static const ShiftTable short_shift(kShortLane);
  uint64_t c = ~crc;
  while (n >= kLanes * kLongLane) {
    c = InterleavedLanes(c, p, kLongLane, long_shift);
    p += kLanes * kLongLane;
    n -= kLanes * kLongLane;
  }
  while (n >= kLanes * kShortLane) {
    c = InterleavedLanes(c, p, kShortLane, short_shift);
    p += kLanes * kShortLane;
    n -= kLanes * kShortLane;
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, Load64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return ~c32;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  static const bool has_sse42 = GetCpuFeatures().sse42;
  const auto* p = static_cast<const uint8_t*>(data);
  return has_sse42 ? ExtendSse42(crc, p, n) : ExtendPortable(crc, p, n);
}

namespace internal {
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  return ExtendPortable(crc, static_cast<const uint8_t*>(data), n);
}
}  // namespace internal

}  // namespace rt
