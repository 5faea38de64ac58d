// UTF-8 validation for input text (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF).
#pragma once

#include <cstddef>

#include "absl/strings/string_view.h"

namespace rt::data {

// True if `s` is entirely valid UTF-8. *bad_offset (optional) receives the byte offset of
// the first invalid sequence when false.
bool IsValidUtf8(absl::string_view s, size_t* bad_offset = nullptr);

// Largest n <= max_bytes such that s[0, n) does not end inside a multi-byte sequence
// (n >= 1 whenever s is non-empty and max_bytes >= 4).
size_t Utf8PrefixAtBoundary(absl::string_view s, size_t max_bytes);

}  // namespace rt::data
