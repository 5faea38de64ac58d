// Block-scaled integer quantisation (int8, int4) of float vectors, with error feedback:
// the wire format of the quantised ring allreduce (collective/quantized_allreduce.h),
// used for round sync's pseudo-gradients (--outer-compress int8|int4).
//
// Layout of one message (little-endian), for `count` floats:
//   header, 12 bytes: magic "RTQB" | u8 version (1) | u8 bits (8 or 4) | u16 zero |
//     u32 count
//   then per block of kQuantBlock (64) values (the last block may be shorter):
//     f32 scale (>= 0, finite), then the block's values as signed integers q in
//     [-Q, Q] (Q = 127 for 8 bits, 7 for 4 bits): one byte each (int8), or two per byte
//     (int4: low nibble first, two's complement; an odd last block pads the high nibble
//     with 0).
// A value decodes as q * scale (one fp32 multiply, the same bits on every CPU). The
// encoder picks scale = max|v| / Q over the block and q = round-half-even(v / scale).
// Bytes per value: int8 1 + 4/64 = 1.0625, int4 0.5 + 4/64 = 0.5625 (+ 12 per message).
// Decoding validates everything (network input): magic, version, bits, the count the
// caller expects, the exact length, finite non-negative scales, integers in [-Q, Q].
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace rt::collective {

inline constexpr size_t kQuantBlock = 64;
inline constexpr size_t kQuantHeaderBytes = 12;

// Encoded size of `count` values at `bits` (8 or 4).
size_t QuantizedBytes(size_t count, int bits);

// *out = the encoding of v (resized to QuantizedBytes). residual (empty or v.size()
// floats): overwritten with v - decode(encoding) per value, in fp32 (error feedback).
void EncodeQuantized(absl::Span<const float> v, int bits, absl::Span<float> residual,
                     std::vector<uint8_t>* out);

// Decodes `bytes` (expected_count values at `bits`) into out (expected_count floats).
absl::Status DecodeQuantized(absl::Span<const uint8_t> bytes, int bits, size_t expected_count,
                             absl::Span<float> out);

}  // namespace rt::collective
