// JSON writing helpers and the strict recursive-descent parser (see json.h).
#include "observe/json.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace rt::observe {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 if it is not valid.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  size_t n;
  uint32_t min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      out += absl::StrFormat("\\u%04x", c);
      ++i;
    } else {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
    }
  }
  out.push_back('"');
  return out;
}

std::string JsonNum(double x) {
  if (!std::isfinite(x)) return "null";
  return absl::StrFormat("%.9g", x);
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

double JsonValue::NumberOr(absl::string_view key, double fallback) const {
  const JsonValue* v = Find(key);
  return v != nullptr && v->is_number() ? v->number() : fallback;
}

std::string JsonValue::StringOr(absl::string_view key, const std::string& fallback) const {
  const JsonValue* v = Find(key);
  return v != nullptr && v->is_string() ? v->str() : fallback;
}

class JsonParser {
 public:
  JsonParser(absl::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue v;
    SkipSpace();
    if (!Value(&v, 0)) return Error();
    SkipSpace();
    if (pos_ != s_.size()) {
      Fail("trailing characters after the value");
      return Error();
    }
    return v;
  }

 private:
  absl::Status Error() const {
    return absl::InvalidArgumentError(absl::StrFormat("offset %d: %s", err_pos_, err_));
  }
  bool Fail(const std::string& what) {
    if (err_.empty()) {
      err_ = what;
      err_pos_ = pos_;
    }
    return false;
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Literal(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return Fail("invalid literal");
    pos_ += word.size();
    return true;
  }
  // `depth` counts the containers around this value: a container opened here is
  // number depth + 1, refused past max_depth_ (so max_depth_ = 1 allows "[1]" but not
  // "[[1]]", the bound the header states).
  bool Value(JsonValue* v, int depth) {
    if (pos_ >= s_.size()) return Fail("unexpected end of input");
    const char c = s_[pos_];
    if ((c == '{' || c == '[') && depth >= max_depth_) return Fail("nested too deeply");
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->type_ = JsonValue::Type::kString;
      return String(&v->string_);
    }
    if (c == 't' || c == 'f') {
      v->type_ = JsonValue::Type::kBool;
      v->bool_ = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      v->type_ = JsonValue::Type::kNull;
      return Literal("null");
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    return Fail(absl::StrFormat("unexpected character 0x%02x", static_cast<uint8_t>(c)));
  }
  bool Number(JsonValue* v) {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > d;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return Fail("bad number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Fail("bad number fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return Fail("bad number exponent");
    }
    const std::string text(s_.substr(start, pos_ - start));
    v->type_ = JsonValue::Type::kNumber;
    v->number_ = std::strtod(text.c_str(), nullptr);
    return true;
  }
  bool Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Fail("bad \\u escape");
      }
    }
    *out = v;
    return true;
  }
  bool String(std::string* out) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= s_.size()) return Fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("control character in a string");
      if (c != '\\') {
        const size_t n = Utf8SequenceLength(s_, pos_);
        if (n == 0) return Fail("invalid UTF-8 in a string");
        out->append(s_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      if (++pos_ >= s_.size()) return Fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low;
            if (s_.substr(pos_, 2) != "\\u") return Fail("unpaired surrogate");
            pos_ += 2;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return Fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("unpaired surrogate");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
  }
  bool Array(JsonValue* v, int depth) {
    v->type_ = JsonValue::Type::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      JsonValue item;
      SkipSpace();
      if (!Value(&item, depth + 1)) return false;
      v->items_.push_back(std::move(item));
      SkipSpace();
      if (pos_ >= s_.size()) return Fail("unterminated array");
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      if (s_[pos_] != ',') return Fail("expected ',' or ']'");
      ++pos_;
    }
  }
  bool Object(JsonValue* v, int depth) {
    v->type_ = JsonValue::Type::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected a member name");
      std::string key;
      if (!String(&key)) return false;
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Fail("expected ':'");
      ++pos_;
      SkipSpace();
      JsonValue item;
      if (!Value(&item, depth + 1)) return false;
      v->members_.emplace_back(std::move(key), std::move(item));
      SkipSpace();
      if (pos_ >= s_.size()) return Fail("unterminated object");
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      if (s_[pos_] != ',') return Fail("expected ',' or '}'");
      ++pos_;
    }
  }

  absl::string_view s_;
  int max_depth_;
  size_t pos_ = 0;
  std::string err_;
  size_t err_pos_ = 0;
};

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth) {
  return JsonParser(text, max_depth).ParseDocument();
}

}  // namespace rt::observe
