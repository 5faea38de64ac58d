// JSON text for the files and lines ringtrain writes for other programs (`sample
// --json`, Hugging Face config files, safetensors headers). Writing only: ringtrain
// never parses JSON from outside.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rt {

// `text` as a JSON string literal, quotes included. '"', '\\' and control characters
// are escaped; valid UTF-8 passes through unchanged; every byte that is not part of a
// valid UTF-8 sequence becomes \ufffd, so the result is always valid JSON (RFC 8259).
std::string JsonQuote(absl::string_view text);

// A finite number in the shortest "%.9g" form (round-trips a float32); "null" for NaN
// and infinities, which JSON cannot represent.
std::string JsonNumber(double x);

// "[1,2,3]".
std::string JsonIntArray(absl::Span<const int> values);
// "[0.5,-1.25,...]" with JsonNumber for each value.
std::string JsonFloatArray(absl::Span<const float> values);

}  // namespace rt
