// What a bf16 test may expect on the kernel path this process runs (a CPU, or the
// RINGTRAIN_ISA / ONEDNN_MAX_CPU_ISA caps that emulate one): where oneDNN has bf16
// matmuls (native AVX512-BF16/AMX, or emulated on AVX-512) a test checks bf16
// arithmetic; where it has none (AVX2 and below) the model promises a clear refusal
// instead, and the test checks that refusal rather than failing on one CPU's behaviour.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "absl/status/status.h"
#include "model/matmul_speed.h"
#include "model/onednn_isa.h"

namespace rt::testing {

// True where oneDNN can create bf16 matmuls (native or emulated).
inline bool Bf16MatmulsRun() { return model::GetBf16Support() != model::Bf16Support::kUnavailable; }

// Checks Gpt::Create's (or the trainer's) refusal of bf16 where oneDNN has none: an
// error that says bf16 is not available and names oneDNN's ISA.
inline void CheckBf16Refusal(const absl::Status& s) {
  INFO("status: ", s.ToString());
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  const std::string m(s.message());
  CHECK(m.find("precision bf16 is not available on this CPU") != std::string::npos);
  CHECK(m.find("oneDNN ISA " + model::OnednnIsaName()) != std::string::npos);
}

}  // namespace rt::testing
