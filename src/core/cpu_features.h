// Run-time CPU feature detection, and the instruction-set path our kernels take.
//
// The default build targets the x86-64 baseline so one binary runs on every VPS;
// kernels with AVX2+FMA or AVX-512 variants (compiled with __attribute__((target(...))))
// ask ActiveIsa() which one to run. oneDNN does its own dispatch, capped the same way
// by model/matmul.cc (ApplyOnednnIsaCap).
//
// RINGTRAIN_ISA=baseline|avx2|avx512|avx512bf16 caps the path (never raises it above
// what the CPU has), so one machine can run and test every path a fleet of cheaper
// VPSes would take. Code whose result lands in replicated state (the optimizer, the
// reduced gradient, codecs) must give the same bits on every path: integer and
// comparison work, or float arithmetic without FMA contraction (optim/adamw.cc).
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace rt {

struct CpuFeatures {
  bool sse42 = false;
  bool avx2_fma = false;
  bool avx512 = false;       // avx512f + bw + vl + dq
  bool avx512_bf16 = false;  // vdpbf16ps / vcvtne2ps2bf16
  bool amx_bf16 = false;
  int logical_cores = 1;
};

// Detected once, then cached. What the CPU can do, whatever RINGTRAIN_ISA says.
const CpuFeatures& GetCpuFeatures();

// Kernel paths, ordered: each includes everything below it.
enum class Isa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// "baseline", "avx2", "avx512", "avx512bf16": the RINGTRAIN_ISA spellings.
const char* IsaName(Isa isa);
absl::StatusOr<Isa> ParseIsa(absl::string_view name);
// The best path this CPU can execute.
Isa DetectedIsa();
// RINGTRAIN_ISA as parsed (an error names the variable and the valid values); the
// detected path when it is unset or empty.
absl::StatusOr<Isa> IsaCapFromEnv();
// The path kernels take now: min(detected, RINGTRAIN_ISA, a test's cap). An invalid
// RINGTRAIN_ISA counts as unset here; main() refuses it before anything runs.
Isa ActiveIsa();
// Tests only: run every kernel on at most `cap` (still never above DetectedIsa()), so
// all paths are checked on one machine. Not for use while kernels run on other threads.
void SetIsaCapForTest(Isa cap);
void ClearIsaCapForTest();

// e.g. "kernels avx2 (RINGTRAIN_ISA=avx2; cpu avx512 avx512_bf16, 2 cores)", for logs
// and bench output.
std::string DescribeCpu();

}  // namespace rt
