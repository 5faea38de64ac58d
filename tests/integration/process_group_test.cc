// ProcessGroup's timeout: a command still running at the deadline is asked to stop
// (SIGTERM to its group, so a tool's trap can clean up, e.g. tear network namespaces
// down), and killed only if it does not stop within the grace period.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <string>

#include "process_group.h"
#include "temp_dir.h"

namespace {

using rt::integration::ProcessGroup;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::testing::TempDir;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("process group: a timed-out command runs its TERM trap before it is killed") {
  TempDir tmp;
  const std::string flag = tmp.path() + "/cleaned";
  const auto start = std::chrono::steady_clock::now();
  // The trap runs once the child sleep (same process group) is gone too.
  RunResult r = RunCommand(
      {"/bin/bash", "-c", "trap 'touch " + flag + "; exit 3' TERM; sleep 60 & wait"}, tmp.path(),
      /*timeout_s=*/1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.timed_out);
  CHECK(Exists(flag));
  CHECK(seconds < 8);  // stopped by SIGTERM, not after the 10 s grace
}

TEST_CASE("process group: a command that ignores SIGTERM is killed after the grace period") {
  TempDir tmp;
  const auto start = std::chrono::steady_clock::now();
  // A grace of 2 s rather than the default 10: the same code path, 8 s less waiting.
  ProcessGroup group(tmp.path());
  group.set_grace_s(2);
  group.Start({"/bin/bash", "-c", "trap '' TERM; sleep 60"});
  const RunResult r = group.WaitAll(/*timeout_s=*/1)[0];
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.timed_out);
  CHECK(seconds >= 3);  // the 1 s timeout, then the whole 2 s grace before SIGKILL
  CHECK(seconds < 12);  // killed then, not left to its 60 s sleep
}
