// How fast oneDNN multiplies matrices on this CPU, per precision, and whether bf16 is
// native, emulated or missing. `bench compute` measures its MFU against these peaks;
// `train --precision bf16` warns with the measured slowdown where bf16 is emulated.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/matmul.h"

namespace rt::model {

struct MatmulSpeed {
  double gflops = 0;
  std::string impl;  // oneDNN's implementation, e.g. "brg:avx512_core_bf16"
};

// Best-of-`reps` GFLOP/s of an n x n x n matmul of `type` on random inputs, after one
// untimed run that creates the primitive, on the OpenMP threads in effect. Errors:
// oneDNN cannot create or run it (the message names the shape and oneDNN's ISA).
absl::StatusOr<MatmulSpeed> MeasureMatmul(MatType type, int64_t n, int reps);

enum class Bf16Support {
  kNative,       // AVX512-BF16 or AMX: bf16 matmuls at about twice the fp32 speed
  kEmulated,     // oneDNN runs bf16 with fp32 instructions (AVX-512 without bf16): slower
  kUnavailable,  // oneDNN has no bf16 matmul for this ISA (AVX2 and below)
};
// From oneDNN's ISA, creating one small bf16 matmul when it is not native.
Bf16Support GetBf16Support();
const char* Bf16SupportName(Bf16Support s);  // "native" | "emulated" | "unavailable"

}  // namespace rt::model
