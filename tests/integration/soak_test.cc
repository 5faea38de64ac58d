// The CI version of the fault soak: tools/soak for about two minutes
// on 4 netns peers, links switching between 1 Gbit/s, 100 Mbit/s and unshaped, a
// random fault (kill -9 and restart, SIGSTOP past --peer-timeout, link down) every ~10 s,
// --compress auto. Every fault must heal (all 4 peers in one view again), nothing may
// hang (the soak's watchdog dumps every thread with gdb and fails), and after SIGTERM
// all peers must stop cleanly at one step with one param_hash. The hour-long run is
// `tools/soak` as root (README, Fault tolerance). Needs root and `ip netns` (CI runs as
// root); without them it says so and returns without checking.
#include <doctest/doctest.h>

#include <string>

#include "cli_runner.h"
#include "netns_cluster.h"
#include "process_group.h"
#include "skip.h"

namespace {

using rt::integration::NetnsUnavailable;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

TEST_CASE("soak: 2 minutes of random faults on 4 netns peers -- all heal, no hang, one hash") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("soak: " + why + " (needs root and ip netns)");
    return;
  }
  const RunResult r = RunCommand(
      {"/usr/bin/python3", RINGTRAIN_SOURCE_DIR "/tools/soak", "--minutes", "2", "--fault-every",
       "10", "--seed", "3", "--prefix", "rtsoak", "--work", tmp.path() + "/soak"},
      tmp.path(), 420, {std::string("RINGTRAIN=") + RINGTRAIN_BINARY});
  INFO(r.out.substr(r.out.size() > 6000 ? r.out.size() - 6000 : 0));
  INFO(r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  // The summary's JSON line: faults injected, none unrecovered, no hang.
  const size_t at = r.out.rfind("{\"bench\": \"soak\"");
  REQUIRE(at != std::string::npos);
  const std::string summary = r.out.substr(at);
  CHECK(summary.find("\"unrecovered\": 0") != std::string::npos);
  CHECK(summary.find("\"hang\": false") != std::string::npos);
  CHECK(summary.find("\"ok\": true") != std::string::npos);
  CHECK(summary.find("\"faults\": 0,") == std::string::npos);  // at least one fault ran
}

}  // namespace
