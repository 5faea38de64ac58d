// JSON helpers: escaping always yields valid JSON, the parser is strict and bounded.
#include "observe/json.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

namespace rt::observe {

TEST_CASE("JsonQuote escapes control characters and replaces invalid UTF-8") {
  CHECK(JsonQuote("a\"b\\c\nd") == "\"a\\\"b\\\\c\\nd\"");
  CHECK(JsonQuote(std::string("\x01", 1)) == "\"\\u0001\"");
  CHECK(JsonQuote("Xin chào") == "\"Xin chào\"");
  CHECK(JsonQuote("\xff") == "\"\xEF\xBF\xBD\"");
  for (const std::string& s :
       {std::string("\xc3"), std::string("a\xe2\x82"), std::string("\xed\xa0\x80")}) {
    auto v = ParseJson(JsonQuote(s));
    REQUIRE_MESSAGE(v.ok(), v.status().ToString());
    CHECK(v->is_string());
  }
}

TEST_CASE("JsonNum writes non-finite numbers as null") {
  CHECK(JsonNum(1.5) == "1.5");
  CHECK(JsonNum(NAN) == "null");
  CHECK(JsonNum(INFINITY) == "null");
}

TEST_CASE("ParseJson reads objects, arrays, numbers, strings with escapes") {
  auto v = ParseJson(R"( {"a": [1, -2.5e3, true, null], "b": "x\u00e9\ud83d\ude00", "c": {}} )");
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  REQUIRE(v->is_object());
  const JsonValue* a = v->Find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->items().size() == 4);
  CHECK(a->items()[1].number() == -2500);
  CHECK(a->items()[2].boolean());
  CHECK(a->items()[3].is_null());
  CHECK(v->StringOr("b", "") == "x\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v->NumberOr("missing", 7) == 7);
}

TEST_CASE("ParseJson refuses malformed input with the offset, and deep nesting") {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"abc", "\"\\x\"",
                          "\"\\ud800\"", "tru", "[1] 2", "{\"a\":1,}", "\"\x01\""}) {
    auto v = ParseJson(bad);
    CHECK_MESSAGE(!v.ok(), "accepted: ", bad);
    if (!v.ok()) CHECK(std::string(v.status().message()).find("offset") != std::string::npos);
  }
  std::string deep(100000, '[');
  CHECK(!ParseJson(deep).ok());
  std::string ok(20, '[');
  ok += std::string(20, ']');
  CHECK(ParseJson(ok).ok());
  // The bound is exact: max_depth containers parse, one more is refused, whether
  // arrays or objects (the fuzzer found 17 levels accepted at a bound of 16).
  for (int max_depth : {1, 2, 16}) {
    std::string arrays = std::string(max_depth, '[') + std::string(max_depth, ']');
    CHECK(ParseJson(arrays, max_depth).ok());
    CHECK(!ParseJson("[" + arrays + "]", max_depth).ok());
    std::string objects = "1";
    for (int i = 0; i < max_depth; ++i) objects = "{\"a\":" + objects + "}";
    CHECK(ParseJson(objects, max_depth).ok());
    CHECK(!ParseJson("[" + objects + "]", max_depth).ok());
  }
  CHECK(ParseJson("7", 0).ok());
  CHECK(!ParseJson("[]", 0).ok());
}

}  // namespace rt::observe
