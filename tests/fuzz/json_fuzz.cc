// Fuzzes the JSON parser (observe/json.h), which reads the status answers of other
// peers (`ringtrain status`), event logs and metrics files. A parsed value written back
// (strings with JsonQuote, numbers with all their digits) must parse to the same value,
// and the depth bound must hold.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "fuzz_check.h"
#include "observe/json.h"

namespace {

using rt::observe::JsonValue;

void Write(const JsonValue& v, std::string* out) {
  switch (v.type()) {
    case JsonValue::Type::kNull:
      *out += "null";
      return;
    case JsonValue::Type::kBool:
      *out += v.boolean() ? "true" : "false";
      return;
    case JsonValue::Type::kNumber:
      *out += std::isfinite(v.number()) ? absl::StrFormat("%.17g", v.number())
                                        : (v.number() > 0 ? "1e999" : "-1e999");
      return;
    case JsonValue::Type::kString:
      *out += rt::observe::JsonQuote(v.str());
      return;
    case JsonValue::Type::kArray: {
      *out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) *out += ',';
        Write(v.items()[i], out);
      }
      *out += ']';
      return;
    }
    case JsonValue::Type::kObject: {
      *out += '{';
      for (size_t i = 0; i < v.members().size(); ++i) {
        if (i > 0) *out += ',';
        *out += rt::observe::JsonQuote(v.members()[i].first);
        *out += ':';
        Write(v.members()[i].second, out);
      }
      *out += '}';
      return;
    }
  }
}

int Depth(const JsonValue& v) {
  int d = 0;
  for (const auto& i : v.items()) d = std::max(d, Depth(i));
  for (const auto& m : v.members()) d = std::max(d, Depth(m.second));
  return v.is_array() || v.is_object() ? d + 1 : d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int kMaxDepth = 16;
  auto v = rt::observe::ParseJson(text, kMaxDepth);
  if (!v.ok()) {
    rt::fuzz::CheckErrorCode(v.status(), {absl::StatusCode::kInvalidArgument});
    return 0;
  }
  FUZZ_CHECK(Depth(*v) <= kMaxDepth);
  std::string once;
  Write(*v, &once);
  auto again = rt::observe::ParseJson(once, kMaxDepth);
  FUZZ_CHECK(again.ok());
  std::string twice;
  Write(*again, &twice);
  if (once != twice) {
    std::fprintf(stderr, "written: %s\nrewritten: %s\n", once.c_str(), twice.c_str());
    FUZZ_CHECK(once == twice);
  }
  return 0;
}
