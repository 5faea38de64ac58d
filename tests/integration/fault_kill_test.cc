// Process faults on a loopback job of 3 `ringtrain train --hosts`
// peers (tiny model): kill -9 of a random non-leader at random moments three times,
// each restarted seconds later; kill -9 of the leader, restarted. The survivors carry
// on, the restarted peer rejoins with identical weights, and at the end every peer is
// at the last step with one param_hash and the loss of an uninterrupted run (1e-4
// relative). Prints "fault figure:" lines (time to training again, steps lost, time
// to a new leader, rejoin time). Each case is bounded (~1-2 min) and kills its peers.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

constexpr int kGlobalBatch = 24;  // 12 slots of --batch 2: shared by 2 or 3 peers

void PrintFigure(const std::string& what, double value, const std::string& unit) {
  std::printf("fault figure: %s = %.3f %s\n", what.c_str(), value, unit.c_str());
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("fault: kill -9 of a random non-leader three times, each restarted seconds later") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::mt19937_64 rng = SeededRng("kill non-leader");
  const auto args_for = [&](int64_t steps) {
    return TinyTrainArgs(tmp / "data", static_cast<int>(steps), kGlobalBatch);
  };
  const std::vector<std::string> args = args_for(kUntilStopped);
  const int base = TestBasePort();

  FaultCluster c(tmp / "run", 3, args, base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 5 && c.LastStep(2) >= 5; }, 90),
                  c.Dump());
  std::uniform_real_distribution<double> moment(0.3, 2.5), restart_after(1.0, 3.0);
  for (int k = 0; k < 3; ++k) {
    Pause(c, moment(rng));
    const int victim = 1 + static_cast<int>(rng() % 2);
    const int survivor = 0;
    c.Poll();
    const uint64_t epoch = c.LastEpoch(survivor);
    const double t_kill = c.Kill9(victim);
    MESSAGE("kill -9 of peer " << victim << " at step " << c.LastStep(survivor));
    const FailureFigures f = WaitTrainingAgain(c, survivor, t_kill, epoch, 30);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    PrintFigure("non-leader kill -9 -> training again", f.to_training_s, "s");
    PrintFigure("steps lost (non-leader kill)", static_cast<double>(f.steps_lost), "steps");
    CHECK(f.steps_lost <= 1);
    Pause(c, restart_after(rng));
    const size_t before = c.MetricCount(victim);
    const double t_start = NowS();
    c.Start(victim);
    const double rejoin = WaitRejoined(c, victim, before, t_start, 60);
    REQUIRE_MESSAGE(rejoin >= 0, "peer " << victim << " did not rejoin\n" << c.Dump());
    PrintFigure("restart -> rejoined and training (tiny model)", rejoin, "s");
  }
  Pause(c, 1.0);
  StopAndCompareWithUninterrupted(c, {0, 1, 2}, tmp / "ref", 3, args_for, base);
}

TEST_CASE("fault: kill -9 of the leader -- a new leader takes over, the old one rejoins") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::mt19937_64 rng = SeededRng("kill leader");
  const auto args_for = [&](int64_t steps) {
    return TinyTrainArgs(tmp / "data", static_cast<int>(steps), kGlobalBatch);
  };
  const std::vector<std::string> args = args_for(kUntilStopped);
  const int base = TestBasePort();

  FaultCluster c(tmp / "run", 3, args, base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(1) >= 5; }, 90), c.Dump());
  Pause(c, std::uniform_real_distribution<double>(0.3, 2.0)(rng));
  c.Poll();
  const uint64_t epoch = c.LastEpoch(1);
  const double t_kill = c.Kill9(0);
  const FailureFigures f = WaitTrainingAgain(c, 1, t_kill, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
  // The new leader (peer 1, the lowest live rank) as logged by the survivors' view change.
  double t_leader = -1;
  for (const auto& [t, line] : TimedLines(c.Logs(1), "view change:")) {
    if (t >= t_kill - 0.05 && line.find("leader " + c.Endpoint(1)) != std::string::npos) {
      t_leader = t;
      break;
    }
  }
  CHECK_MESSAGE(t_leader >= 0, "no view change with leader " << c.Endpoint(1) << "\n" << c.Dump());
  PrintFigure("leader kill -9 -> new leader (view change logged)", t_leader - t_kill, "s");
  PrintFigure("leader kill -9 -> training again", f.to_training_s, "s");
  PrintFigure("steps lost (leader kill)", static_cast<double>(f.steps_lost), "steps");
  CHECK(f.steps_lost <= 1);
  CHECK(t_leader - t_kill <= 5.0);
  // Metrics name the new leader too.
  c.Poll();
  CHECK(c.Metrics(1).back().leader != c.Metrics(1).front().leader);

  Pause(c, 2.0);
  const size_t before = c.MetricCount(0);
  const double t_start = NowS();
  c.Start(0);
  const double rejoin = WaitRejoined(c, 0, before, t_start, 60);
  REQUIRE_MESSAGE(rejoin >= 0, "the old leader did not rejoin\n" << c.Dump());
  PrintFigure("restart of the old leader -> rejoined and training (tiny model)", rejoin, "s");
  Pause(c, 1.0);
  StopAndCompareWithUninterrupted(c, {0, 1, 2}, tmp / "ref", 3, args_for, base);
}
