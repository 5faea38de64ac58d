// The process is named `ringtrain` (/proc/PID/comm) however it is started: directly,
// through a symlink of another name, and with OMP_WAIT_POLICY already set (then main
// does not re-execute itself). `pkill -x ringtrain`, `pidof` and `top` rely on it.
#include <doctest/doctest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using rt::integration::ProcessGroup;
using rt::integration::TempDir;

// /proc/PID/comm without its newline ("" once the process is gone).
std::string Comm(pid_t pid) {
  std::string s = rt::testing::ReadFile("/proc/" + std::to_string(pid) + "/comm");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

TEST_CASE("process name: a training peer is `ringtrain` in /proc/PID/comm") {
  TempDir tmp;
  rt::integration::fault::WriteFaultData(tmp / "data");
  const std::string link = tmp / "rt-started-as-something-else";
  REQUIRE(symlink(RINGTRAIN_BINARY, link.c_str()) == 0);
  struct Case {
    const char* what;
    std::string binary;
    std::vector<std::string> env;
  };
  const std::vector<Case> cases = {
      {"the binary itself", RINGTRAIN_BINARY, {}},
      {"a symlink of another name", link, {}},
      {"a symlink, OMP_WAIT_POLICY set (no re-exec)", link, {"OMP_WAIT_POLICY=ACTIVE"}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    CAPTURE(c.what);
    const std::string metrics = tmp / ("m" + std::to_string(k) + ".jsonl");
    std::vector<std::string> argv = {c.binary, "train"};
    for (const std::string& a : rt::integration::fault::TinyTrainArgs(tmp / "data", 100000, 4)) {
      argv.push_back(a);
    }
    argv.push_back("--metrics=" + metrics);
    std::vector<std::string> env = c.env;
    env.push_back("OMP_NUM_THREADS=1");
    ProcessGroup group(tmp.path());
    group.Start(argv, env);
    // The first metrics line: main has re-executed itself (if it does) by then.
    REQUIRE_MESSAGE(rt::integration::WaitForLines(metrics, 1, 60), "no step was trained");
    CHECK(Comm(group.pid(0)) == "ringtrain");
    group.KillAll();
  }
}
