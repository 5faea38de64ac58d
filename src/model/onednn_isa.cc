// RINGTRAIN_ISA -> dnnl::set_max_cpu_isa (see onednn_isa.h).
#include "model/onednn_isa.h"

#include <cstdlib>
#include <mutex>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/cpu_features.h"
#include "core/log.h"

namespace rt::model {
namespace {

dnnl::cpu_isa OnednnCap(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return dnnl::cpu_isa::sse41;  // oneDNN's lowest JIT level (x86-64-v2 VPSes)
    case Isa::kAvx2:
      return dnnl::cpu_isa::avx2;
    case Isa::kAvx512:
      return dnnl::cpu_isa::avx512_core;
    case Isa::kAvx512Bf16:
      return dnnl::cpu_isa::avx512_core_bf16;
  }
  return dnnl::cpu_isa::all;
}

}  // namespace

void ApplyOnednnIsaCap() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr ||
        std::getenv("DNNL_MAX_CPU_ISA") != nullptr) {
      return;
    }
    const char* env = std::getenv("RINGTRAIN_ISA");
    if (env == nullptr || *env == '\0') return;
    absl::StatusOr<Isa> cap = IsaCapFromEnv();
    if (!cap.ok()) return;  // main() refuses it before any command runs
    if (dnnl::set_max_cpu_isa(OnednnCap(*cap)) != dnnl::status::success) {
      LogWarning("oneDNN refused the instruction-set cap RINGTRAIN_ISA=%s: matmuls run %s", env,
                 OnednnIsaName());
    }
  });
}

std::string OnednnIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

std::string DescribeComputePaths() {
  ApplyOnednnIsaCap();
  return DescribeCpu() + ", oneDNN " + OnednnIsaName();
}

}  // namespace rt::model
