// Network partitions in Linux network namespaces
// (tools/netns-cluster two-site layout, cut with tools/netns-partition, i.e. `ip link
// set down` on the link between the sites): 5 peers split 3 + 2 -- the 3 carry on,
// the 2 pause (no quorum) and rejoin once the link is back; 4 peers split 2 + 2 --
// both sides pause, then all resume. At the end (SIGTERM to every peer: checkpoint,
// exit 0) every peer is at one step with one param_hash. Needs root and `ip netns`
// (CI runs as root); without them it says so and returns without checking. The
// namespaces are removed by a destructor, also when a check fails. Bounded (~1-2 min).
#include <doctest/doctest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "fault_harness.h"
#include "netns_cluster.h"
#include "skip.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::NetnsCluster;
using rt::integration::NetnsUnavailable;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

const std::string kTools = std::string(RINGTRAIN_SOURCE_DIR) + "/tools/";
constexpr int kPort = 29500;

// A two-site netns cluster (sites split by halves) for the lifetime of this object,
// which tools/netns-partition cuts and heals.
class Sites {
 public:
  Sites(const TempDir& tmp, int n)
      : tmp_(tmp),
        cluster_(tmp, "pt",
                 {std::to_string(n), "--layout", "two-site", "--sites", "halves", "--rate", "1gbit",
                  "--site-rate", "1gbit", "--port", std::to_string(kPort)}) {}
  const RunResult& up() const { return cluster_.up_result(); }
  std::vector<std::string> Launch(int i) const {
    return {"ip", "netns", "exec", cluster_.Namespace(i)};
  }
  // tools/netns-partition split|heal; true if it worked.
  bool Partition(const std::string& what) {
    RunResult r = RunCommand({"/bin/bash", kTools + "netns-partition", what}, tmp_.path(), 30,
                             cluster_.Env());
    INFO("netns-partition ", what, ": ", r.err);
    CHECK(r.exit_code == 0);
    return r.exit_code == 0;
  }

 private:
  const TempDir& tmp_;
  NetnsCluster cluster_;
};

std::vector<std::string> Endpoints(int n) {
  std::vector<std::string> e;
  for (int i = 0; i < n; ++i)
    e.push_back("10.77.0." + std::to_string(i + 1) + ":" + std::to_string(kPort));
  return e;
}

// Peer i logged "paused:" at or after time t (NowS clock).
bool PausedSince(const FaultCluster& c, int i, double t) {
  for (const auto& [when, line] : TimedLines(c.Logs(i), "paused:")) {
    if (when >= t - 0.05) return true;
  }
  return false;
}

// Ends the job: SIGTERM to every peer (as `systemctl stop` on every host).
void StopAll(FaultCluster& c) {
  for (int i = 0; i < c.size(); ++i) c.Signal(i, SIGTERM);
}

std::vector<std::string> PartitionArgs(const TempDir& tmp) {
  // Stopped by SIGTERM, not by --steps: the partition scenario takes what it takes.
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", 1000000, 120);
  args.push_back("--peer-timeout=2");
  return args;
}

}  // namespace

TEST_CASE("fault: netns partition 3+2 -- the 3 train on, the 2 pause and rejoin after the heal") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("netns partition test: " + why + " (needs root and ip netns)");
    return;
  }
  WriteFaultData(tmp / "data");
  Sites sites(tmp, 5);
  INFO("netns-cluster up: ", sites.up().err);
  REQUIRE(sites.up().exit_code == 0);
  FaultCluster c(tmp / "run", Endpoints(5), PartitionArgs(tmp),
                 [&](int i) { return sites.Launch(i); },
                 {"RINGTRAIN_SECRET=fault-partition-test-secret"});
  c.WriteHostsAll({0, 1, 2, 3, 4});
  for (int i = 0; i < 5; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil(
                      [&] {
                        for (int i = 0; i < 5; ++i) {
                          if (c.LastStep(i) < 5) return false;
                        }
                        return true;
                      },
                      120),
                  c.Dump());
  const uint64_t epoch = c.LastEpoch(0);
  const double t_split = NowS();
  REQUIRE(sites.Partition("split"));
  const FailureFigures f = WaitTrainingAgain(c, 0, t_split, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, "the majority did not train again\n" << c.Dump());
  std::printf("fault figure: partition 3+2 -> majority training again = %.3f s\n", f.to_training_s);
  CHECK(c.Metrics(0).back().peers == 3);
  REQUIRE_MESSAGE(
      c.WaitUntil([&] { return PausedSince(c, 3, t_split) && PausedSince(c, 4, t_split); }, 30),
      c.Dump());
  CHECK(c.Logs(3).find("quorum") != std::string::npos);
  // The minority never trains while cut off; the majority does.
  const size_t n3 = c.MetricCount(3), n4 = c.MetricCount(4);
  const int64_t at = c.LastStep(0);
  Pause(c, 3.0);
  CHECK(c.MetricCount(3) == n3);
  CHECK(c.MetricCount(4) == n4);
  CHECK(c.LastStep(0) > at + 5);

  const double t_heal = NowS();
  REQUIRE(sites.Partition("heal"));
  const double r3 = WaitRejoined(c, 3, n3, t_heal, 90);
  const double r4 = WaitRejoined(c, 4, n4, t_heal, 90);
  const bool rejoined = r3 >= 0 && r4 >= 0;
  REQUIRE_MESSAGE(rejoined, "the minority did not rejoin\n" << c.Dump());
  std::printf("fault figure: heal of a 3+2 partition -> minority training again = %.3f s, %.3f s\n",
              r3, r4);
  Pause(c, 1.0);
  StopAll(c);
  CheckFinal(c, {0, 1, 2, 3, 4}, -1, nullptr, 120);
}

TEST_CASE("fault: netns partition 2+2 -- both sides pause, then all resume") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("netns partition test: " + why + " (needs root and ip netns)");
    return;
  }
  WriteFaultData(tmp / "data");
  Sites sites(tmp, 4);
  INFO("netns-cluster up: ", sites.up().err);
  REQUIRE(sites.up().exit_code == 0);
  FaultCluster c(tmp / "run", Endpoints(4), PartitionArgs(tmp),
                 [&](int i) { return sites.Launch(i); },
                 {"RINGTRAIN_SECRET=fault-partition-test-secret"});
  c.WriteHostsAll({0, 1, 2, 3});
  for (int i = 0; i < 4; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil(
                      [&] {
                        for (int i = 0; i < 4; ++i) {
                          if (c.LastStep(i) < 5) return false;
                        }
                        return true;
                      },
                      120),
                  c.Dump());
  const double t_split = NowS();
  REQUIRE(sites.Partition("split"));
  REQUIRE_MESSAGE(c.WaitUntil(
                      [&] {
                        for (int i = 0; i < 4; ++i) {
                          if (!PausedSince(c, i, t_split)) return false;
                        }
                        return true;
                      },
                      30),
                  c.Dump());
  std::printf("fault figure: partition 2+2 -> both sides paused after %.3f s\n", NowS() - t_split);
  std::vector<size_t> counts;
  for (int i = 0; i < 4; ++i) counts.push_back(c.MetricCount(i));
  Pause(c, 3.0);
  for (int i = 0; i < 4; ++i)
    CHECK_MESSAGE(c.MetricCount(i) == counts[i], "peer " << i << " trained");

  const double t_heal = NowS();
  REQUIRE(sites.Partition("heal"));
  for (int i = 0; i < 4; ++i) {
    const double r = WaitRejoined(c, i, counts[i], t_heal, 90);
    REQUIRE_MESSAGE(r >= 0, "peer " << i << " did not resume\n" << c.Dump());
    std::printf("fault figure: heal of a 2+2 partition -> peer %d training again = %.3f s\n", i, r);
  }
  REQUIRE(c.WaitUntil([&] { return c.Metrics(0).back().peers == 4; }, 30));
  Pause(c, 1.0);
  StopAll(c);
  CheckFinal(c, {0, 1, 2, 3}, -1, nullptr, 120);
}
