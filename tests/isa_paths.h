// Runs the enclosing doctest case once per kernel path (baseline, avx2, avx512,
// avx512bf16), capped with SetIsaCapForTest, so every path is checked on one machine.
// A path this CPU cannot execute runs as the best one it can (the cap never raises
// ActiveIsa() above DetectedIsa()); the INFO line says which path really ran.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "core/cpu_features.h"

namespace rt::testing {

struct IsaScope {
  explicit IsaScope(Isa cap) { SetIsaCapForTest(cap); }
  ~IsaScope() { ClearIsaCapForTest(); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

}  // namespace rt::testing

#define RT_EVERY_KERNEL_PATH()                                            \
  ::rt::Isa rt_kernel_path = ::rt::Isa::kBaseline;                        \
  SUBCASE("baseline path") { rt_kernel_path = ::rt::Isa::kBaseline; }     \
  SUBCASE("avx2 path") { rt_kernel_path = ::rt::Isa::kAvx2; }             \
  SUBCASE("avx512 path") { rt_kernel_path = ::rt::Isa::kAvx512; }         \
  SUBCASE("avx512bf16 path") { rt_kernel_path = ::rt::Isa::kAvx512Bf16; } \
  ::rt::testing::IsaScope rt_isa_scope(rt_kernel_path);                   \
  INFO("kernel path ", std::string(::rt::IsaName(::rt::ActiveIsa())))
