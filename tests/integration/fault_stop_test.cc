// SIGSTOP of a peer past --peer-timeout, then SIGCONT. The two
// others exclude it after the timeout and carry on; the stopped peer, resumed, finds
// itself out of date (excluded), discards its state and rejoins with the members'
// weights; at the end every peer is at the last step with one param_hash and the loss
// of an uninterrupted run. Bounded (~1-2 min); kills its peers on failure.
#include <doctest/doctest.h>
#include <signal.h>

#include <random>
#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

}  // namespace

TEST_CASE("fault: SIGSTOP of a peer past --peer-timeout, SIGCONT -- excluded, then rejoins") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::mt19937_64 rng = SeededRng("sigstop");
  const auto args_for = [&](int64_t steps) {
    std::vector<std::string> a = TinyTrainArgs(tmp / "data", static_cast<int>(steps), 24);
    a.push_back("--peer-timeout=2");
    return a;
  };
  const std::vector<std::string> args = args_for(kUntilStopped);
  const int base = TestBasePort();

  FaultCluster c(tmp / "run", 3, args, base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 5 && c.LastStep(2) >= 5; }, 90),
                  c.Dump());
  Pause(c, std::uniform_real_distribution<double>(0.3, 2.0)(rng));
  c.Poll();
  const uint64_t epoch = c.LastEpoch(0);
  const double t_stop = NowS();
  c.Signal(2, SIGSTOP);
  const FailureFigures f = WaitTrainingAgain(c, 0, t_stop, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
  std::printf("fault figure: SIGSTOP (peer timeout 2 s) -> training again = %.3f s\n",
              f.to_training_s);
  std::printf("fault figure: steps lost (SIGSTOP) = %lld steps\n",
              static_cast<long long>(f.steps_lost));
  CHECK(f.to_training_s >= 1.0);  // a silent peer is only removed after the timeout
  CHECK(f.steps_lost <= 1);
  // The two train on while the third is stopped; it reports nothing.
  const int64_t at = c.LastStep(0);
  const size_t stopped_count = c.MetricCount(2);
  Pause(c, 2.0);
  CHECK(c.LastStep(0) > at + 5);
  CHECK(c.MetricCount(2) == stopped_count);
  CHECK(c.Metrics(0).back().peers == 2);

  const double t_cont = NowS();
  c.Signal(2, SIGCONT);
  const double rejoin = WaitRejoined(c, 2, stopped_count, t_cont, 60);
  REQUIRE_MESSAGE(rejoin >= 0, "the resumed peer did not rejoin\n" << c.Dump());
  std::printf("fault figure: SIGCONT -> rejoined and training = %.3f s\n", rejoin);
  CHECK_MESSAGE(c.Logs(2).find("excluded") != std::string::npos, c.Dump());
  Pause(c, 1.0);
  StopAndCompareWithUninterrupted(c, {0, 1, 2}, tmp / "ref", 3, args_for, base);
}
