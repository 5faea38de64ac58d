// CRC32C fast paths (VPCLMULQDQ folding, three interleaved crc32 chains joined by
// shift tables; core/crc32c.cc) equal the bytewise table at every length, offset and
// starting value; frames rely on it.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/crc32c.h"

namespace rt::internal {
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);    // core/crc32c.cc
uint32_t Crc32cExtendCrc32Lanes(uint32_t crc, const void* data, size_t n);  // core/crc32c.cc
}  // namespace rt::internal

TEST_CASE("crc32c: interleaved lanes equal the table at all sizes and offsets") {
  std::vector<uint8_t> data(3 * 8192 * 2 + 3 * 256 * 3 + 61);
  uint32_t x = 12345;
  for (auto& b : data) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  for (size_t n :
       {size_t{0}, size_t{7}, size_t{767}, size_t{768}, size_t{769}, size_t{3 * 8192 - 1},
        size_t{3 * 8192}, size_t{3 * 8192 + 800}, data.size() - 3}) {
    for (size_t offset : {0, 1, 3}) {
      CAPTURE(n);
      CAPTURE(offset);
      uint32_t fast = rt::Crc32c(data.data() + offset, n);
      uint32_t slow = rt::internal::Crc32cExtendPortable(0, data.data() + offset, n);
      CHECK(fast == slow);
      CHECK(rt::internal::Crc32cExtendCrc32Lanes(0, data.data() + offset, n) == slow);
      // Continuing from a non-zero crc joins lanes correctly too.
      uint32_t head = rt::Crc32c(data.data(), 5);
      CHECK(rt::Crc32cExtend(head, data.data() + offset, n) ==
            rt::internal::Crc32cExtendPortable(head, data.data() + offset, n));
    }
  }
}
