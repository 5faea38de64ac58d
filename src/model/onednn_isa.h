// oneDNN's instruction set, capped like our kernels (core/cpu_features.h).
//
// RINGTRAIN_ISA caps oneDNN too, so that `RINGTRAIN_ISA=avx2` on an AVX-512 machine
// runs what an AVX2 VPS would run, matmuls included. oneDNN takes a cap only before
// its first JIT kernel (or the first query of its ISA), so MatmulEngine applies it
// before it first creates an engine, once per process;
// a test's SetIsaCapForTest does not reach oneDNN. An explicit ONEDNN_MAX_CPU_ISA in
// the environment is left alone (the user chose it).
#pragma once

#include <string>

namespace rt::model {

// Idempotent and thread-safe; logs a warning if oneDNN refuses the cap.
void ApplyOnednnIsaCap();
// The ISA oneDNN dispatches to, e.g. "avx2", "avx512_core_bf16", "avx512_core_amx".
std::string OnednnIsaName();
// Both paths for a log's first lines, cap applied first: e.g. "kernels avx2
// (RINGTRAIN_ISA=avx2; cpu avx512 avx512_bf16, 2 cores), oneDNN avx2".
std::string DescribeComputePaths();

}  // namespace rt::model
