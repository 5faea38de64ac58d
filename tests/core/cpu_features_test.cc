// Kernel-path selection: RINGTRAIN_ISA spellings, the cap never raises the path above
// what the CPU runs, a test cap lowers it; the bulk bf16 conversions give the same bits
// on every path (codecs on a mixed fleet must agree).
#include "core/cpu_features.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bf16_convert.h"
#include "isa_paths.h"

namespace rt {
namespace {

TEST_CASE("RINGTRAIN_ISA names parse, a wrong one names the variable and the choices") {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    absl::StatusOr<Isa> back = ParseIsa(IsaName(isa));
    REQUIRE(back.ok());
    CHECK(*back == isa);
  }
  CHECK(*ParseIsa(" AVX2 ") == Isa::kAvx2);
  CHECK_FALSE(ParseIsa("avx").ok());
  CHECK_FALSE(ParseIsa("").ok());

  const char* saved = std::getenv("RINGTRAIN_ISA");
  const std::string keep = saved != nullptr ? saved : "";
  setenv("RINGTRAIN_ISA", "avx-2", 1);
  absl::StatusOr<Isa> bad = IsaCapFromEnv();
  REQUIRE_FALSE(bad.ok());
  const std::string message(bad.status().message());
  CHECK(message.find("RINGTRAIN_ISA") != std::string::npos);
  CHECK(message.find("avx-2") != std::string::npos);
  CHECK(message.find("avx512bf16") != std::string::npos);
  setenv("RINGTRAIN_ISA", "baseline", 1);
  CHECK(*IsaCapFromEnv() == Isa::kBaseline);
  unsetenv("RINGTRAIN_ISA");
  CHECK(*IsaCapFromEnv() == DetectedIsa());
  if (saved != nullptr) setenv("RINGTRAIN_ISA", keep.c_str(), 1);
}

TEST_CASE("a cap lowers the path and never raises it above the CPU") {
  const Isa best = ActiveIsa();
  CHECK(static_cast<int>(best) <= static_cast<int>(DetectedIsa()));
  for (Isa cap : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    testing::IsaScope scope(cap);
    CAPTURE(IsaName(cap));
    CHECK(static_cast<int>(ActiveIsa()) <= static_cast<int>(cap));
    CHECK(static_cast<int>(ActiveIsa()) <= static_cast<int>(best));
  }
  CHECK(ActiveIsa() == best);
  CHECK(DescribeCpu().find(std::string("kernels ") + IsaName(best)) == 0);
}

TEST_CASE("bulk bf16 conversions give the same bits on every path") {
  RT_EVERY_KERNEL_PATH();
  // Every rounding case: ties both ways, subnormals, infinities, NaNs with payloads,
  // and lengths that leave every tail size of 8, 16 and 32 lanes.
  std::vector<uint32_t> bits;
  for (uint32_t hi : {0x00000000u, 0x00010000u, 0x3f800000u, 0x7f7f0000u, 0x7f800000u, 0x7fc00000u,
                      0x80000000u, 0xbf800000u, 0xff800000u, 0x7f810000u}) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      bits.push_back(hi | lo);
  }
  uint32_t state = 12345;
  while (bits.size() < 1000) bits.push_back(state = state * 1664525u + 1013904223u);
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{15}, size_t{17}, size_t{31},
                   size_t{33}, x.size()}) {
    CAPTURE(n);
    std::vector<bf16_t> scalar(n);
    for (size_t i = 0; i < n; ++i) scalar[i] = FloatToBf16(x[i]);
    std::vector<float> back_scalar(n);
    for (size_t i = 0; i < n; ++i) back_scalar[i] = Bf16ToFloat(scalar[i]);
    std::vector<bf16_t> h(n);
    FloatToBf16N(x.data(), h.data(), n);
    CHECK(h == scalar);
    std::vector<float> back(n);
    Bf16ToFloatN(scalar.data(), back.data(), n);
    CHECK((n == 0 || std::memcmp(back.data(), back_scalar.data(), n * 4) == 0));
  }
}

}  // namespace
}  // namespace rt
