// `--size N` of `ringtrain bench codec` and `bench allreduce` (elements; suffixes
// K, M, G = 1e3, 1e6, 1e9). Defined once in bench_codec.cc, so flag names stay
// unique across the binary; bench allreduce reads the same flag through this header.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, size);

namespace rt::cli {

// "124M" -> 124000000; "1000" -> 1000. Refuses empty, negative, zero, junk.
absl::StatusOr<int64_t> ParseElementCount(const std::string& text);

}  // namespace rt::cli
