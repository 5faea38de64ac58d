// The CI version of the fault soak: tools/soak on 4 netns peers with one fault of each
// kind, in turn, ~4 s apart (jittered): kill -9 of a random peer and its restart 2-8 s
// later, SIGSTOP of one for 1.5-3x --peer-timeout, its link down for 3-10 s; before each
// fault the links switch at random between 1 Gbit/s, 100 Mbit/s and unshaped; --compress
// auto. About a minute: the two-minute random soak this replaced ran ~6 faults of the
// kinds its seed drew (seed 3 draws link, link, stop, link, link, kill first), so one of
// each covers every kind in half the time.
// Every fault must heal (all 4 peers in one view again), nothing may
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

TEST_CASE(
    "soak: a kill -9, a SIGSTOP and a link down on 4 netns peers -- all heal, no hang, one hash") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("soak: " + why + " (needs root and ip netns)");
    return;
  }
  const RunResult r = RunCommand(
      {"/usr/bin/python3", RINGTRAIN_SOURCE_DIR "/tools/soak", "--faults", "kill,stop,link",
       "--fault-every", "4", "--seed", "3", "--prefix", "rtsoak", "--work", tmp.path() + "/soak"},
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
  // Each kind ran once (and a soak that injected nothing cannot pass).
  CHECK(summary.find("\"faults\": 3,") != std::string::npos);
  CHECK(summary.find("\"by_kind\": {\"kill\": 1, \"stop\": 1, \"link\": 1}") != std::string::npos);
}

}  // namespace
