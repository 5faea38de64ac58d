// CRC32C (Castagnoli), the checksum of frames, shards and checkpoint sections.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (chosen at run time), else
// a table. Crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt {

// Extends `crc` (the value returned for the bytes before) with `n` more bytes.
// Start with crc = 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace rt
