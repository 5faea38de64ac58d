// CPU feature detection via GCC's __builtin_cpu_supports (see cpu_features.h).
#include "core/cpu_features.h"

#include <thread>

#include "absl/strings/str_cat.h"

namespace rt {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    __builtin_cpu_init();
    f.sse42 = __builtin_cpu_supports("sse4.2");
    f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
    f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
    unsigned n = std::thread::hardware_concurrency();
    f.logical_cores = n == 0 ? 1 : static_cast<int>(n);
    return f;
  }();
  return features;
}

std::string DescribeCpu() {
  const CpuFeatures& f = GetCpuFeatures();
  std::string s;
  if (f.avx512) absl::StrAppend(&s, "avx512 ");
  else if (f.avx2_fma) absl::StrAppend(&s, "avx2 ");
  if (f.avx512_bf16) absl::StrAppend(&s, "avx512_bf16 ");
  if (f.amx_bf16) absl::StrAppend(&s, "amx_bf16 ");
  absl::StrAppend(&s, "(", f.logical_cores, " cores)");
  return s;
}

}  // namespace rt
