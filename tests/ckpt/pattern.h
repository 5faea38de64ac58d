// Helpers shared by the checkpoint tests: deterministic byte patterns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rt::ckpt::testing {

// n bytes of a fixed pseudo-random sequence chosen by `seed`.
inline std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

}  // namespace rt::ckpt::testing
