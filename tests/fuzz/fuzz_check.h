// Helpers shared by the fuzz targets: checks that abort (libFuzzer then keeps the
// input as a crash file) with the condition that failed, and status-code checks.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

#define FUZZ_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

namespace rt::fuzz {

// The key of the sealed links in the frame target and its seeds (make_seeds.cc).
inline constexpr std::array<uint8_t, 32> kFrameKey = {
    1,   8,   15,  22,  29,  36,  43,  50,  57,  64,  71,  78,  85,  92,  99,  106,
    113, 120, 127, 134, 141, 148, 155, 162, 169, 176, 183, 190, 197, 204, 211, 218};

// A decoder's error must be one of the codes its header documents.
inline void CheckErrorCode(const absl::Status& s, std::initializer_list<absl::StatusCode> allowed) {
  FUZZ_CHECK(!s.ok());
  for (absl::StatusCode c : allowed) {
    if (s.code() == c) return;
  }
  std::fprintf(stderr, "unexpected error code: %s\n", s.ToString().c_str());
  std::abort();
}

inline bool SameBytes(absl::Span<const uint8_t> a, absl::Span<const uint8_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

template <typename T>
void StoreLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
template <typename T>
T LoadLe(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}

}  // namespace rt::fuzz
