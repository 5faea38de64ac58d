// f16 / bf16 encoding: every half value round-trips, float -> half rounds to nearest
// even exactly as the compiler's _Float16 does (over boundaries, subnormals and random
// values), overflow becomes infinity, and bytes are little-endian in order.
#include "export/tensor_encoding.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.h"

using rt::exporter::ExportDtype;
using rt::exporter::FloatToHalf;
using rt::exporter::HalfToFloat;

namespace {

uint16_t Reference(float f) {  // GCC's _Float16 conversion: IEEE round to nearest even
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

bool SameHalf(uint16_t a, uint16_t b) {
  const bool a_nan = (a & 0x7c00) == 0x7c00 && (a & 0x3ff),
             b_nan = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
  return a_nan ? b_nan : a == b;
}

}  // namespace

TEST_CASE("every half value converts to float and back unchanged") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const uint16_t bits = static_cast<uint16_t>(h);
    _Float16 half;
    std::memcpy(&half, &bits, 2);
    const float ref = static_cast<float>(half);
    if (std::isnan(ref)) {
      CHECK(std::isnan(f));
      continue;
    }
    REQUIRE(f == ref);
    REQUIRE(std::signbit(f) == std::signbit(ref));
    REQUIRE(FloatToHalf(f) == h);
  }
}

TEST_CASE("float -> half rounds to nearest even like _Float16, everywhere") {
  std::vector<float> values = {0.0f,           -0.0f,          1.0f,      65504.0f,
                               65519.99f,      65520.0f,       -65520.0f, 1e9f,
                               6.1035156e-05f, 6.0975552e-05f, 5.96e-08f, 2.98e-08f,
                               2.9802322e-08f, 1e-10f,         0.1f,      -3.14159f};
  values.push_back(std::numeric_limits<float>::infinity());
  values.push_back(-std::numeric_limits<float>::infinity());
  values.push_back(std::numeric_limits<float>::denorm_min());
  // Midpoints between neighbouring halves (ties) and their float neighbours.
  for (uint32_t h = 0; h < 0x7bff; h += 7) {
    const double lo = HalfToFloat(static_cast<uint16_t>(h)),
                 hi = HalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    values.push_back(mid);
    values.push_back(std::nextafter(mid, 0.0f));
    values.push_back(std::nextafter(mid, 1e30f));
    values.push_back(-mid);
  }
  std::mt19937 rng(15);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
    values.push_back(std::ldexp(static_cast<float>(rng()) / 4294967296.0f, -(int)(rng() % 30)));
  }
  int mismatches = 0;
  for (float f : values) mismatches += !SameHalf(FloatToHalf(f), Reference(f));
  CHECK(mismatches == 0);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);  // rounds up to infinity
  CHECK(FloatToHalf(65519.99f) == 0x7bff);
  CHECK(FloatToHalf(std::nanf("")) == 0x7e00);
}

TEST_CASE("AppendEncoded writes little-endian values in order, LargestMagnitude") {
  const std::vector<float> v = {1.0f, -2.5f, 3e-3f};
  std::string out = "x";
  rt::exporter::AppendEncoded(v, ExportDtype::kF32, &out);
  REQUIRE(out.size() == 1 + 12);
  CHECK(std::memcmp(out.data() + 1, v.data(), 12) == 0);
  out.clear();
  rt::exporter::AppendEncoded(v, ExportDtype::kF16, &out);
  REQUIRE(out.size() == 6);
  uint16_t h[3];
  std::memcpy(h, out.data(), 6);
  CHECK(h[0] == 0x3c00);
  CHECK(h[1] == 0xc100);
  CHECK(h[2] == FloatToHalf(3e-3f));
  out.clear();
  rt::exporter::AppendEncoded(v, ExportDtype::kBf16, &out);
  std::memcpy(h, out.data(), 6);
  CHECK(h[0] == rt::FloatToBf16(1.0f));
  CHECK(h[2] == rt::FloatToBf16(3e-3f));
  CHECK(rt::exporter::LargestMagnitude(v) == 2.5f);
  CHECK(std::isinf(rt::exporter::LargestMagnitude(std::vector<float>{1.0f, std::nanf("")})));
}

TEST_CASE("ParseExportDtype accepts f32 f16 bf16 and names a bad value") {
  CHECK(*rt::exporter::ParseExportDtype("f32") == ExportDtype::kF32);
  CHECK(*rt::exporter::ParseExportDtype("f16") == ExportDtype::kF16);
  CHECK(*rt::exporter::ParseExportDtype("bf16") == ExportDtype::kBf16);
  absl::StatusOr<ExportDtype> bad = rt::exporter::ParseExportDtype("fp16");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message() == "--dtype 'fp16' is not one of f32, f16, bf16");
}
