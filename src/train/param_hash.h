// A fast 64-bit hash of a float buffer's bytes, to check that replicas are identical
// (DESIGN invariant 2) and to compare runs (metrics `param_hash`). Not cryptographic.
// The value depends only on the bytes: the same on every peer and thread count.
#pragma once

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace rt::train {

uint64_t ParamHash(absl::Span<const float> params);
std::string ParamHashHex(uint64_t hash);  // 16 lowercase hex digits

}  // namespace rt::train
