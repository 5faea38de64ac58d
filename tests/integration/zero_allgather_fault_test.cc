// `train --zero 1` on a loopback ring of 3 whose parameter allgather breaks half-way,
// the fault injected where a kill -9 could only land by chance: a peer freezes itself
// (RINGTRAIN_TEST_STOP_IN_ALLGATHER, cli/train.cc) inside its Nth allgather, and the
// two others exclude it after --peer-timeout.
//   - after-own: it froze after sending its own segment of the last bucket, so one
//     survivor holds the whole update and the other does not: the ring resumes after
//     the step, and the one that missed it receives the parameters and applies its kept
//     moment update once;
//   - before: it froze before sending anything: neither survivor completed the step,
//     the ring redoes it, and the kept gradients are dropped.
// The frozen peer is then killed and restarted. Every peer ends at one step and hash
// (compared at every step, --check-every 1), with the loss of an uninterrupted run to
// 1e-6: a moment update applied twice, or lost, moves it by far more.
#include <doctest/doctest.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "fault_harness.h"
#include "process_group.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

// True once process `pid` is stopped (state T in /proc/PID/stat).
bool Stopped(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t close = stat.rfind(')');  // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("zero: the parameter allgather broken half-way -- no step applied twice, one hash") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  const auto args_for = [&](int64_t steps) {
    std::vector<std::string> a = TinyTrainArgs(tmp / "data", static_cast<int>(steps), 24);
    for (const char* f : {"--zero=1", "--clip=0.05", "--bucket-mb=0.004", "--check-every=1",
                          "--balance=off", "--probe-every=-1", "--peer-timeout=2"}) {
      a.push_back(f);
    }
    return a;
  };
  // Peer 2's first run freezes after its own segment, its second at the start; the
  // third runs clean. Each at its 4th allgather: a few steps into the ring it joined.
  const std::vector<std::string> faults = {"4:after-own", "4:before"};
  int peer2_runs = 0;
  FaultCluster c(
      tmp / "run", FaultCluster::LoopbackEndpoints(3, base + 10), args_for(kUntilStopped),
      [&](int i) {
        std::vector<std::string> launch;
        if (i == 2 && peer2_runs < static_cast<int>(faults.size())) {
          launch = {"/usr/bin/env", "RINGTRAIN_TEST_STOP_IN_ALLGATHER=" + faults[peer2_runs]};
        }
        if (i == 2) ++peer2_runs;
        return launch;
      });
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  const char* kCompleted = "completed by other peers after the ring broke";
  for (const std::string& fault : faults) {
    CAPTURE(fault);
    REQUIRE_MESSAGE(c.WaitUntil([&] { return Stopped(c.Pid(2)); }, 90),
                    "peer 2 did not freeze in an allgather\n"
                        << c.Dump());
    const double t_stop = NowS();
    c.Poll();
    const uint64_t epoch = std::max(c.LastEpoch(0), c.LastEpoch(1));
    const FailureFigures f = WaitTrainingAgain(c, 0, t_stop, epoch, 40);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    WaitTrainingAgain(c, 1, t_stop, epoch, 10);
    // after-own: exactly one survivor missed the update and completed it from the
    // other's parameters; before: nobody completed the step, so nobody does that.
    const size_t completed = Count(c.Logs(0), kCompleted) + Count(c.Logs(1), kCompleted);
    CHECK_MESSAGE(completed == 1, c.Dump());
    std::printf("fault figure: --zero 1 allgather broken (%s) -> training again = %.3f s\n",
                fault.c_str(), f.to_training_s);
    c.Kill9(2);
    const size_t before = c.MetricCount(2);
    const double t_start = NowS();
    c.Start(2);
    REQUIRE_MESSAGE(WaitRejoined(c, 2, before, t_start, 60) >= 0, "peer 2 did not rejoin\n"
                                                                      << c.Dump());
  }
  Pause(c, 0.5);
  for (int i = 0; i < 3; ++i) c.Signal(i, SIGTERM);
  CheckFinal(c, {0, 1, 2}, -1, nullptr, 120);
  const int64_t last = c.Metrics(0).back().step;
  const Metric ref = ReferenceRun(tmp / "ref", 3, args_for(last), base + 20, 150);
  REQUIRE(ref.step == last);
  const double rel = std::fabs(c.Metrics(0).back().loss - ref.loss) / std::fabs(ref.loss);
  std::printf(
      "fault figure: --zero 1 after two broken allgathers, final loss at step %lld: %.9g, "
      "uninterrupted %.9g (relative %.2g)\n",
      static_cast<long long>(last), c.Metrics(0).back().loss, ref.loss, rel);
  CHECK(rel <= 1e-6);
}

// The same faults under round sync with the outer state sharded (--outer-shard on,
// trainer_round_shard.cc), whose outer step ends with the same parameter allgather:
// after-own, the survivor that missed the end completes its staged momentum once; before,
// nobody completed the outer step and the staged momentum is dropped. With H = 1 every
// step is an outer step, so replicas agree at every step and the harness's checks of
// one hash per (epoch, step) apply. Round sync's survivors train on with 2 peers (each
// peer's inner steps on other slots than in an uninterrupted ring), so the end checks
// one hash on every peer, not an uninterrupted run's loss.
TEST_CASE("round sync, outer state sharded: the allgather broken half-way -- one hash") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", kUntilStopped, 24);
  for (const char* f :
       {"--outer-every=1", "--outer-compress=none", "--outer-overlap=off", "--outer-shard=on",
        "--bucket-mb=0.004", "--balance=off", "--probe-every=-1", "--peer-timeout=2"}) {
    args.push_back(f);
  }
  const std::vector<std::string> faults = {"4:after-own", "4:before"};
  int peer2_runs = 0;
  FaultCluster c(tmp / "run", FaultCluster::LoopbackEndpoints(3, base + 30), args, [&](int i) {
    std::vector<std::string> launch;
    if (i == 2 && peer2_runs < static_cast<int>(faults.size())) {
      launch = {"/usr/bin/env", "RINGTRAIN_TEST_STOP_IN_ALLGATHER=" + faults[peer2_runs]};
    }
    if (i == 2) ++peer2_runs;
    return launch;
  });
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  const char* kCompleted = "the outer step was completed by other peers after the ring broke";
  for (const std::string& fault : faults) {
    CAPTURE(fault);
    REQUIRE_MESSAGE(c.WaitUntil([&] { return Stopped(c.Pid(2)); }, 90),
                    "peer 2 did not freeze in an allgather\n"
                        << c.Dump());
    const double t_stop = NowS();
    c.Poll();
    const uint64_t epoch = std::max(c.LastEpoch(0), c.LastEpoch(1));
    const FailureFigures f = WaitTrainingAgain(c, 0, t_stop, epoch, 40);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    WaitTrainingAgain(c, 1, t_stop, epoch, 10);
    const size_t completed = Count(c.Logs(0), kCompleted) + Count(c.Logs(1), kCompleted);
    CHECK_MESSAGE(completed == 1, c.Dump());
    std::printf(
        "fault figure: round sync sharded, allgather broken (%s) -> training again = %.3f s\n",
        fault.c_str(), f.to_training_s);
    c.Kill9(2);
    const size_t before = c.MetricCount(2);
    const double t_start = NowS();
    c.Start(2);
    REQUIRE_MESSAGE(WaitRejoined(c, 2, before, t_start, 60) >= 0, "peer 2 did not rejoin\n"
                                                                      << c.Dump());
  }
  Pause(c, 0.5);
  for (int i = 0; i < 3; ++i) c.Signal(i, SIGTERM);
  CheckFinal(c, {0, 1, 2}, -1, nullptr, 120);
}
