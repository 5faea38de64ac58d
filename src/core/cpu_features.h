// Run-time CPU feature detection for our own kernels.
//
// The default build targets the x86-64 baseline so one binary runs on every VPS;
// kernels that have AVX-512 variants (compiled with __attribute__((target(...))))
// call these to pick a path once. oneDNN does its own dispatch.
#pragma once

#include <string>

namespace rt {

struct CpuFeatures {
  bool sse42 = false;
  bool avx2_fma = false;
  bool avx512 = false;       // avx512f + bw + vl + dq
  bool avx512_bf16 = false;  // vdpbf16ps / vcvtne2ps2bf16
  bool amx_bf16 = false;
  int logical_cores = 1;
};

// Detected once, then cached.
const CpuFeatures& GetCpuFeatures();
// e.g. "avx512 avx512_bf16 (2 cores)", for logs and bench output.
std::string DescribeCpu();

}  // namespace rt
