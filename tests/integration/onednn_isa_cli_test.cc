// CPUs without AVX-512 or without bf16, emulated with oneDNN's ISA cap: `bench
// compute` under an AVX2 cap runs fp32 and says bf16 is not available (it aborted with a
// dnnl::error before), `--precision bf16` there is a clear error with exit 1, and under
// AVX512_CORE bf16 is measured and called emulated. `plan --gflops` takes one figure per
// peer. Tiny shapes: a few seconds in all. Where this run emulates a CPU without AVX-512
// (a cap in the environment), the AVX512_CORE case reports itself skipped; on a real CPU
// without it, it checks that the cap does not raise oneDNN's ISA.
#include <doctest/doctest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli_runner.h"
#include "core/cpu_features.h"
#include "skip.h"

namespace {

using rt::integration::RunResult;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs ringtrain with oneDNN capped at `isa` (ONEDNN_MAX_CPU_ISA, inherited by the child).
RunResult RunCapped(const char* isa, const std::vector<std::string>& args, const TempDir& dir) {
  setenv("ONEDNN_MAX_CPU_ISA", isa, 1);
  RunResult r = RunRingtrain(args, dir.path());
  unsetenv("ONEDNN_MAX_CPU_ISA");
  return r;
}

const std::vector<std::string> kTinyBench = {
    "bench",     "compute", "--layers", "2", "--heads", "2",   "--dim",   "64",
    "--seq-len", "32",      "--batch",  "2", "--vocab", "256", "--steps", "2"};

TEST_CASE("bench compute under an AVX2 cap runs fp32 and says bf16 is not available") {
  TempDir dir;
  std::vector<std::string> args = kTinyBench;
  args.insert(args.end(), {"--precision", "fp32"});
  RunResult r = RunCapped("AVX2", args, dir);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "bf16: not available on this CPU (ISA avx2)"));
  CHECK(Contains(r.out, "\"isa\":\"avx2\",\"bf16\":\"unavailable\""));
  CHECK_FALSE(Contains(r.err, "terminate called"));

  args = kTinyBench;
  args.insert(args.end(), {"--precision", "bf16"});
  r = RunCapped("AVX2", args, dir);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 1);
  CHECK(Contains(r.err,
                 "error: --precision bf16: bf16 is not available on this CPU (oneDNN ISA "
                 "avx2 has no bf16 matmul)"));
}

// Why this run emulates a CPU without AVX-512 (a cap in the environment below it, as in
// `ONEDNN_MAX_CPU_ISA=AVX2 RINGTRAIN_ISA=avx2 tools/test`); "" if it does not.
std::string EnvironmentCapBelowAvx512() {
  if (const char* r = getenv("RINGTRAIN_ISA"); r != nullptr && *r != '\0') {
    absl::StatusOr<rt::Isa> cap = rt::ParseIsa(r);
    if (cap.ok() && *cap < rt::Isa::kAvx512) return std::string("RINGTRAIN_ISA=") + r;
  }
  if (const char* o = getenv("ONEDNN_MAX_CPU_ISA"); o != nullptr && *o != '\0') {
    const std::string isa = o;
    if (isa.rfind("AVX512", 0) != 0 && isa.rfind("AVX10", 0) != 0 && isa != "ALL") {
      return "ONEDNN_MAX_CPU_ISA=" + isa;
    }
  }
  return "";
}

TEST_CASE("bench compute under an AVX512_CORE cap measures bf16 and calls it emulated") {
  const std::string env_cap = EnvironmentCapBelowAvx512();
  if (!env_cap.empty()) {
    // The test would raise the emulated CPU to AVX-512 by setting its own cap.
    rt::testing::ReportSkip(env_cap +
                            " emulates a CPU without AVX-512: an AVX512_CORE cap "
                            "cannot apply to it");
    return;
  }
  TempDir dir;
  std::vector<std::string> args = kTinyBench;
  if (rt::DetectedIsa() < rt::Isa::kAvx512) {
    // A cap never raises oneDNN's ISA: on this CPU bf16 stays unavailable and fp32 runs.
    MESSAGE("this CPU has no AVX-512: checking that an AVX512_CORE cap does not raise the ISA");
    args.insert(args.end(), {"--precision", "fp32"});
    RunResult r = RunCapped("AVX512_CORE", args, dir);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.exit_code == 0);
    CHECK(Contains(r.out, "\"bf16\":\"unavailable\""));
    CHECK_FALSE(Contains(r.out, "\"isa\":\"avx512"));
    return;
  }
  args.insert(args.end(), {"--precision", "bf16"});
  RunResult r = RunCapped("AVX512_CORE", args, dir);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "emulated, no avx512_bf16/AMX in ISA avx512_core"));
  CHECK(Contains(r.out, "\"isa\":\"avx512_core\",\"bf16\":\"emulated\""));
}

TEST_CASE("plan --gflops per peer prints the balanced split and refuses a wrong count") {
  TempDir dir;
  const std::vector<std::string> base = {"plan", "--layers",  "2",  "--heads",     "2",   "--dim",
                                         "64",   "--seq-len", "32", "--vocab",     "256", "--batch",
                                         "4",    "--peers",   "4",  "--precision", "fp32"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--gflops", "120,120,80,60"});
  RunResult r = RunRingtrain(args, dir.path());
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(Contains(r.out, "\"balanced_slots\":[6,5,3,2]"));
  CHECK(Contains(r.out, "--balance on"));
  args = base;
  args.insert(args.end(), {"--gflops", "120,80"});
  r = RunRingtrain(args, dir.path());
  CHECK(r.exit_code == 2);
  CHECK(Contains(r.err, "--gflops lists 2 figures for --peers 4"));
}

}  // namespace
