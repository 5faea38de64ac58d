// JSON for status pages, event logs and plots: writing helpers (escaped strings,
// non-finite numbers as null) and a strict, bounded parser of one JSON value
// (RFC 8259), for files and answers that come from outside (metrics JSONL, status
// answers of other peers).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::observe {

// `s` as a JSON string literal with quotes. Control characters are escaped; bytes
// that are not valid UTF-8 become U+FFFD, so the output is always valid JSON.
std::string JsonQuote(absl::string_view s);
// A number as JSON: up to 9 significant digits; NaN and infinities are `null`.
std::string JsonNum(double x);

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  JsonValue() = default;

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  bool boolean() const { return bool_; }
  double number() const { return number_; }
  const std::string& str() const { return string_; }
  const std::vector<JsonValue>& items() const { return items_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return members_; }

  // Object member `key` (the first if repeated), or nullptr.
  const JsonValue* Find(absl::string_view key) const;
  // Object member `key` as a number / string, or `fallback` if absent or of another type.
  double NumberOr(absl::string_view key, double fallback) const;
  std::string StringOr(absl::string_view key, const std::string& fallback) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// Parses exactly one value (surrounding whitespace allowed). Nesting deeper than
// `max_depth` is refused, so hostile input cannot exhaust the stack. Errors are
// InvalidArgument with the byte offset: "offset 17: expected ':'".
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth = 32);

}  // namespace rt::observe
