// Signals during compute: a training peer under the AVX2 caps (oneDNN's gemm:jit sgemm,
// our AVX2 kernels) gets a SIGHUP every 5 ms for 30 steps of the small model and must
// train to the end and exit 0. A handler that ran on the training thread inside
// oneDNN's AVX2 sgemm corrupted the heap (glibc: "free(): invalid pointer" in
// dnnl_primitive_execute within the first step; a SIGTERM did the same in a fault
// test); train/stop_signals.cc keeps the handlers off the compute threads. glibc's
// checking malloc (libc_malloc_debug, when installed) finds the corruption at the
// next free. Bounded (~30 s); the peer is killed on failure.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fault_harness.h"

namespace {

using rt::integration::TempDir;
using rt::integration::fault::TinyTrainArgs;
using rt::integration::fault::WriteFaultData;

constexpr char kMallocDebug[] = "/lib/x86_64-linux-gnu/libc_malloc_debug.so.0";

}  // namespace

TEST_CASE("signals: a SIGHUP every 5 ms during AVX2-capped training corrupts nothing") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::vector<std::string> args = {RINGTRAIN_BINARY, "train"};
  for (std::string a : TinyTrainArgs(tmp / "data", 30, 3)) {
    if (a == "--layers=2") a = "--layers=6";
    if (a == "--heads=2") a = "--heads=6";
    if (a == "--dim=32") a = "--dim=384";
    if (a == "--batch=2") a = "--batch=1";
    args.push_back(a);
  }
  for (const std::string& a :
       {std::string("--ckpt-dir"), tmp / "ckpt", std::string("--ckpt-minutes=0")}) {
    args.push_back(a);
  }
  const std::string out = tmp / "out", err = tmp / "err";
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
    dup2(open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
    setenv("RINGTRAIN_ISA", "avx2", 1);
#if !defined(RINGTRAIN_SANITIZED)
    if (access(kMallocDebug, R_OK) == 0) {
      setenv("LD_PRELOAD", kMallocDebug, 1);
      setenv("GLIBC_TUNABLES", "glibc.malloc.check=3", 1);
    }
#endif
    execv(argv[0], argv.data());
    _exit(127);
  }
  REQUIRE(pid > 0);
  // SIGHUP's default action ends a process: storm only once the handlers are in (the
  // first step printed comes after them).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  bool exited = false, stormed = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (!stormed) stormed = rt::testing::ReadFile(out).find("step ") != std::string::npos;
    if (stormed) ::kill(pid, SIGHUP);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  const std::string log = rt::testing::ReadFile(err);
  CHECK_MESSAGE(stormed, log);
  REQUIRE_MESSAGE(exited, "training did not end within 120 s\n" << log);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                "exit status " << status << " (signal "
                               << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")\n"
                               << log);
  CHECK(rt::testing::ReadFile(out).find("step    30/30") != std::string::npos);
}
