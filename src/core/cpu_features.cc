// CPU feature detection via GCC's __builtin_cpu_supports, and the kernel path chosen
// from it and RINGTRAIN_ISA (see cpu_features.h).
#include "core/cpu_features.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace rt {
namespace {

constexpr Isa kAllIsas[] = {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16};

// -1: no test cap. Relaxed: kernels read it per call, tests set it between calls.
std::atomic<int> g_test_cap{-1};

// AMX-BF16 as GCC's __builtin_cpu_supports("amx-bf16") answers it (clang before 16
// does not know that name): CPUID.(7,0):EDX bit 22, with the OS saving the tile state
// (XCR0 bits 17 and 18).
bool CpuHasAmxBf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22))) return false;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 0x60000u) == 0x60000u;
}

Isa MinIsa(Isa a, Isa b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    __builtin_cpu_init();
    f.sse42 = __builtin_cpu_supports("sse4.2");
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.amx_bf16 = CpuHasAmxBf16();
    unsigned n = std::thread::hardware_concurrency();
    f.logical_cores = n == 0 ? 1 : static_cast<int>(n);
    return f;
  }();
  return features;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Bf16:
      return "avx512bf16";
  }
  return "?";
}

absl::StatusOr<Isa> ParseIsa(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::StripAsciiWhitespace(name));
  for (Isa isa : kAllIsas) {
    if (lower == IsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown instruction set '", name,
                                                 "' (one of: baseline, avx2, avx512, avx512bf16)"));
}

Isa DetectedIsa() {
  const CpuFeatures& f = GetCpuFeatures();
  // AVX-512 machines without FMA do not exist; AVX2 paths also use FMA.
  if (f.avx512_bf16 && f.avx2_fma) return Isa::kAvx512Bf16;
  if (f.avx512 && f.avx2_fma) return Isa::kAvx512;
  if (f.avx2_fma) return Isa::kAvx2;
  return Isa::kBaseline;
}

absl::StatusOr<Isa> IsaCapFromEnv() {
  const char* env = std::getenv("RINGTRAIN_ISA");
  if (env == nullptr || *env == '\0') return DetectedIsa();
  absl::StatusOr<Isa> isa = ParseIsa(env);
  if (!isa.ok())
    return absl::InvalidArgumentError(absl::StrCat("RINGTRAIN_ISA: ", isa.status().message()));
  return *isa;
}

Isa ActiveIsa() {
  static const Isa from_env = [] {
    absl::StatusOr<Isa> cap = IsaCapFromEnv();
    return MinIsa(DetectedIsa(), cap.ok() ? *cap : DetectedIsa());
  }();
  const int test_cap = g_test_cap.load(std::memory_order_relaxed);
  return test_cap < 0 ? from_env : MinIsa(from_env, static_cast<Isa>(test_cap));
}

void SetIsaCapForTest(Isa cap) {
  g_test_cap.store(static_cast<int>(cap), std::memory_order_relaxed);
}
void ClearIsaCapForTest() { g_test_cap.store(-1, std::memory_order_relaxed); }

std::string DescribeCpu() {
  const CpuFeatures& f = GetCpuFeatures();
  std::string s = absl::StrCat("kernels ", IsaName(ActiveIsa()), " (");
  const char* env = std::getenv("RINGTRAIN_ISA");
  if (env != nullptr && *env != '\0') absl::StrAppend(&s, "RINGTRAIN_ISA=", env, "; ");
  absl::StrAppend(&s, "cpu");
  if (f.avx512) {
    absl::StrAppend(&s, " avx512");
  } else if (f.avx2_fma) {
    absl::StrAppend(&s, " avx2");
  } else {
    absl::StrAppend(&s, " x86-64");
  }
  if (f.avx512_bf16) absl::StrAppend(&s, " avx512_bf16");
  if (f.amx_bf16) absl::StrAppend(&s, " amx_bf16");
  absl::StrAppend(&s, ", ", f.logical_cores, " cores)");
  return s;
}

}  // namespace rt
