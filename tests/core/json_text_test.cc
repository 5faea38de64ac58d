// JSON text: strings are always valid JSON (escapes, UTF-8 kept, bad bytes replaced),
// numbers round-trip float32 and non-finite ones become null.
#include "core/json_text.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <limits>
#include <vector>

using rt::JsonQuote;

TEST_CASE("JsonQuote escapes quotes, backslashes and control characters") {
  CHECK(JsonQuote("") == "\"\"");
  CHECK(JsonQuote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(JsonQuote("x\ny\tz\r") == "\"x\\ny\\tz\\r\"");
  CHECK(JsonQuote(std::string("\x01\x1f\x7f", 3)) == "\"\\u0001\\u001f\\u007f\"");
  CHECK(JsonQuote(std::string("a\0b", 3)) == "\"a\\u0000b\"");
}

TEST_CASE("JsonQuote keeps valid UTF-8 and replaces every invalid byte") {
  CHECK(JsonQuote("Đà Nẵng, Việt Nam ▁ 😀") == "\"Đà Nẵng, Việt Nam ▁ 😀\"");
  CHECK(JsonQuote("\xff") == "\"\\ufffd\"");
  CHECK(JsonQuote("a\xc3") == "\"a\\ufffd\"");                      // truncated 2-byte sequence
  CHECK(JsonQuote("\xc0\xaf") == "\"\\ufffd\\ufffd\"");             // overlong '/'
  CHECK(JsonQuote("\xed\xa0\x80") == "\"\\ufffd\\ufffd\\ufffd\"");  // surrogate U+D800
  CHECK(JsonQuote("\xf4\x90\x80\x80") == "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF
  CHECK(JsonQuote("\xe1\xba") == "\"\\ufffd\\ufffd\"");
}

TEST_CASE("JsonNumber round-trips float32 and writes null for non-finite values") {
  const std::vector<float> values = {0.0f,   -1.5f,     3.14159274f,
                                     1e-30f, -6.02e23f, std::numeric_limits<float>::denorm_min()};
  for (float v : values) {
    const std::string s = rt::JsonNumber(v);
    CHECK(static_cast<float>(std::strtod(s.c_str(), nullptr)) == v);
  }
  CHECK(rt::JsonNumber(std::numeric_limits<double>::quiet_NaN()) == "null");
  CHECK(rt::JsonNumber(-std::numeric_limits<double>::infinity()) == "null");
  CHECK(rt::JsonIntArray(std::vector<int>{}) == "[]");
  CHECK(rt::JsonIntArray(std::vector<int>{1, -2, 3}) == "[1,-2,3]");
  CHECK(rt::JsonFloatArray(std::vector<float>{0.5f, -2.0f}) == "[0.5,-2]");
}
