// Fault figures with the small model (--layers 6 --heads 6 --dim 384, ~10.6M
// parameters: weights + AdamW state ~130 MB to transfer): 3 loopback peers with the
// default --peer-timeout; kill -9 of a non-leader (time to training again, steps
// lost), its restart (time until it trains again, including the state transfer,
// whose size and time the peer logs), kill -9 of the leader (time to a new leader),
// its restart. Ends with SIGTERM to every peer: one step, one param_hash, exit 0.
// Prints "fault figure:" lines. Bounded (~1-2 min); kills its peers on failure.
#include <doctest/doctest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

void Figure(const std::string& what, double value, const std::string& unit) {
  std::printf("fault figure (small model 6x384): %s = %.3f %s\n", what.c_str(), value,
              unit.c_str());
  std::fflush(stdout);
}

// The last "state transfer: received ..." line of peer i, or "".
std::string TransferLine(const FaultCluster& c, int i) {
  const auto lines = TimedLines(c.Logs(i), "state transfer: received");
  return lines.empty() ? "" : lines.back().second;
}

}  // namespace

TEST_CASE("fault: figures with the small model -- kill, rejoin with state transfer, new leader") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", 1000000, 3);
  for (std::string& a : args) {
    if (a == "--layers=2") a = "--layers=6";
    if (a == "--heads=2") a = "--heads=6";
    if (a == "--dim=32") a = "--dim=384";
    if (a == "--batch=2") a = "--batch=1";
  }
  FaultCluster c(tmp / "run", 3, args, TestBasePort());
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 3 && c.LastStep(2) >= 3; }, 120),
                  c.Dump());
  const auto& m = c.Metrics(0);
  Figure("step time before the failures", m.back().seen_s - m[m.size() - 2].seen_s, "s");

  // A non-leader.
  uint64_t epoch = c.LastEpoch(0);
  double t_kill = c.Kill9(2);
  FailureFigures f = WaitTrainingAgain(c, 0, t_kill, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, c.Dump());
  Figure("non-leader kill -9 -> training again", f.to_training_s, "s");
  Figure("steps lost (non-leader kill)", static_cast<double>(f.steps_lost), "steps");
  Pause(c, 1.0);
  size_t before = c.MetricCount(2);
  double t_start = NowS();
  c.Start(2);
  double rejoin = WaitRejoined(c, 2, before, t_start, 90);
  REQUIRE_MESSAGE(rejoin >= 0, c.Dump());
  Figure("restart -> rejoined and training (process start, join, state transfer, first step)",
         rejoin, "s");
  const std::string transfer = TransferLine(c, 2);
  CHECK_MESSAGE(!transfer.empty(), c.Dump());
  std::printf("fault figure (small model 6x384): %s\n", transfer.c_str());

  // The leader.
  Pause(c, 1.0);
  c.Poll();
  epoch = c.LastEpoch(1);
  t_kill = c.Kill9(0);
  f = WaitTrainingAgain(c, 1, t_kill, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, c.Dump());
  double t_leader = -1;
  for (const auto& [t, line] : TimedLines(c.Logs(1), "view change:")) {
    if (t >= t_kill - 0.05 && line.find("leader " + c.Endpoint(1)) != std::string::npos) {
      t_leader = t;
      break;
    }
  }
  CHECK(t_leader >= 0);
  Figure("leader kill -9 -> new leader (view change logged)", t_leader - t_kill, "s");
  Figure("leader kill -9 -> training again", f.to_training_s, "s");
  Figure("steps lost (leader kill)", static_cast<double>(f.steps_lost), "steps");
  CHECK(f.steps_lost <= 1);
  CHECK(t_leader - t_kill <= 5.0);
  Pause(c, 1.0);
  before = c.MetricCount(0);
  t_start = NowS();
  c.Start(0);
  rejoin = WaitRejoined(c, 0, before, t_start, 90);
  REQUIRE_MESSAGE(rejoin >= 0, c.Dump());
  Figure("restart of the old leader -> rejoined and training", rejoin, "s");

  Pause(c, 1.0);
  for (int i = 0; i < 3; ++i) c.Signal(i, SIGTERM);
  CheckFinal(c, {0, 1, 2}, -1, nullptr, 120);
}
