// `ringtrain --version`: version, commit and the compute paths this CPU gets, so that a
// user can tell from one line per host what a fleet of mixed CPUs will run.
#include "cli/version.h"

#include <cstdlib>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/strings/str_format.h"
#include "core/build_info.h"
#include "core/cpu_features.h"
#include "model/gpt_config.h"
#include "model/matmul_speed.h"
#include "model/onednn_isa.h"

namespace rt::cli {

int PrintVersion() {
  absl::PrintF("ringtrain %s (commit %s)\n", BuildVersion(), BuildCommit());
  // The cap must reach oneDNN before its first primitive or ISA query.
  model::ApplyOnednnIsaCap();
  const CpuFeatures& cpu = GetCpuFeatures();
  absl::PrintF("cpu      %s%s%s, %d logical cores\n",
               cpu.avx512     ? "avx512"
               : cpu.avx2_fma ? "avx2"
                              : "x86-64",
               cpu.avx512_bf16 ? " avx512_bf16" : "", cpu.amx_bf16 ? " amx_bf16" : "",
               cpu.logical_cores);
  const char* cap = std::getenv("RINGTRAIN_ISA");
  absl::PrintF("kernels  %s%s%s (ringtrain's own: layer norm, GELU, softmax, AdamW, codecs)\n",
               IsaName(ActiveIsa()), cap != nullptr && *cap != '\0' ? ", RINGTRAIN_ISA=" : "",
               cap != nullptr ? cap : "");
  const dnnl_version_t* v = dnnl_version();
  absl::PrintF("oneDNN   %d.%d.%d, ISA %s (matmuls)\n", v->major, v->minor, v->patch,
               model::OnednnIsaName());
  const model::Bf16Support bf16 = model::GetBf16Support();
  const char* what = bf16 == model::Bf16Support::kNative     ? "about twice fp32's speed"
                     : bf16 == model::Bf16Support::kEmulated ? "slower than fp32"
                                                             : "--precision bf16 is refused";
  absl::PrintF("bf16     %s (%s); --precision auto computes in %s here\n",
               model::Bf16SupportName(bf16), what,
               model::PrecisionName(*model::ParsePrecision("auto")));
  return 0;
}

}  // namespace rt::cli
