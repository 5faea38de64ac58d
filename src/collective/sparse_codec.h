// Wire encoding of a sparse gradient contribution (top-k output).
//
// Layout (little-endian):
//   header, 20 bytes: magic "RTSP" | u8 version (1) | u8 flags (bit 0: zstd) |
//     u16 zero | u32 length (bucket floats) | u32 count | u32 payload_bytes (before zstd)
//   payload (zstd-compressed as one frame if flag bit 0, else raw):
//     index gaps, delta-coded: gap_0 = idx_0, gap_j = idx_j - idx_{j-1} - 1, in blocks
//       of 128: ceil(count/128) width bytes (bits per gap, 0..32), then each block's
//       gaps bit-packed LSB-first at its width, each block padded to a whole byte;
//     values: count bf16, byte planes split (all low bytes, then all high bytes),
//       which zstd compresses better than interleaved bytes.
// zstd is applied only when level > 0 and it makes the message smaller.
// Decoding validates everything (it reads network input): magic, version, flags,
// length, counts, sizes, gap widths, that indices stay below length.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collective/topk_select.h"

namespace rt::collective {

// Appends nothing else: *out is replaced by the encoding of `v` for a bucket of
// `length` floats. zstd_level 0 = off.
void EncodeSparse(const SparseVector& v, uint32_t length, int zstd_level,
                  std::vector<uint8_t>* out);

// Parses `bytes` for a bucket of `expected_length` floats into *out.
absl::Status DecodeSparse(absl::Span<const uint8_t> bytes, uint32_t expected_length,
                          SparseVector* out);

}  // namespace rt::collective
