// Little-endian field writer and strict reader for the small binary messages that
// cross the network (cluster control messages, status reports).
//
// ByteWriter appends integers (any width), bools (one byte 0/1), doubles (IEEE bits
// as u64), strings and byte blobs (u32 length + bytes). ByteReader reads the same
// fields; the first failure (truncation, a bool other than 0/1, a length above the
// caller's bound) sticks, later reads return zero values, and error() names the field
// that failed ("heartbeat report: truncated").
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace rt {

class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}
  template <typename T>
  void Int(T v) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    U u = static_cast<U>(v);
    for (size_t i = 0; i < sizeof(T); ++i) out_->push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  void Bool(bool b) { out_->push_back(b ? 1 : 0); }
  void Double(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof(bits));
    Int<uint64_t>(bits);
  }
  void String(const std::string& s) {
    Int<uint32_t>(static_cast<uint32_t>(s.size()));
    out_->insert(out_->end(), s.begin(), s.end());
  }
  void Strings(const std::vector<std::string>& v) {
    Int<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const std::string& s : v) String(s);
  }
  void Bytes(const std::vector<uint8_t>& b) {
    Int<uint32_t>(static_cast<uint32_t>(b.size()));
    out_->insert(out_->end(), b.begin(), b.end());
  }

 private:
  std::vector<uint8_t>* out_;
};

class ByteReader {
 public:
  explicit ByteReader(absl::Span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T Int(const char* what) {
    static_assert(std::is_integral_v<T>);
    if (!Need(sizeof(T), what)) return 0;
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      u |= static_cast<std::make_unsigned_t<T>>(in_[pos_ + i]) << (8 * i);
    }
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }
  bool Bool(const char* what) {
    const uint8_t b = Int<uint8_t>(what);
    if (b > 1) Fail(absl::StrCat(what, ": bad bool ", b));
    return b == 1;
  }
  double Double(const char* what) {
    const uint64_t bits = Int<uint64_t>(what);
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    return d;
  }
  std::string String(const char* what, size_t max_bytes) {
    const uint32_t n = Int<uint32_t>(what);
    if (n > max_bytes) {
      Fail(absl::StrFormat("%s: string of %d bytes exceeds %d", what, n, max_bytes));
      return "";
    }
    if (!Need(n, what)) return "";
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<std::string> Strings(const char* what, size_t max_items, size_t max_bytes) {
    const uint32_t n = Int<uint32_t>(what);
    std::vector<std::string> v;
    if (n > max_items) {
      Fail(absl::StrFormat("%s: list of %d items exceeds %d", what, n, max_items));
      return v;
    }
    for (uint32_t i = 0; i < n && ok(); ++i) v.push_back(String(what, max_bytes));
    return v;
  }
  std::vector<uint8_t> Bytes(const char* what, size_t max_bytes) {
    const uint32_t n = Int<uint32_t>(what);
    if (n > max_bytes) {
      Fail(absl::StrFormat("%s: %d bytes exceed %d", what, n, max_bytes));
      return {};
    }
    if (!Need(n, what)) return {};
    std::vector<uint8_t> b(in_.begin() + pos_, in_.begin() + pos_ + n);
    pos_ += n;
    return b;
  }
  bool ok() const { return error_.empty(); }
  bool AtEnd() const { return pos_ == in_.size(); }
  const std::string& error() const { return error_; }
  void Fail(const std::string& e) {
    if (error_.empty()) error_ = e;
  }

 private:
  bool Need(size_t n, const char* what) {
    if (!ok()) return false;
    if (in_.size() - pos_ < n) {
      Fail(absl::StrCat(what, ": truncated"));
      return false;
    }
    return true;
  }
  absl::Span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace rt
