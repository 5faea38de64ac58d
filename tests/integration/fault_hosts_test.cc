// Growing and shrinking a job by editing the hosts file: 3 peers
// train; a 4th line is added to every copy of the hosts file, the peers get SIGHUP
// and a 4th peer starts: it joins with identical weights (its first step's
// param_hash equals the others'). Then its line is removed from every copy and every
// peer gets SIGHUP: it leaves cleanly (exit 0) at a step boundary. The global batch
// stays constant, training never stops for long, and the 3 end at the last step
// with one param_hash and the loss of an uninterrupted 3-peer run. Bounded (~1-2 min).
// The peers are signalled with the documented command (docs/fault-tolerance.md:
// `parallel-ssh -h vps.txt 'pkill -HUP -x ringtrain'`: its quoted part, run on each
// "host"), each peer in a PID
// namespace of its own (as root), so pkill sees that peer and nothing of other tests.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

constexpr int kGlobalBatch = 24;  // 12 slots of --batch 2: shared by 3 or 4 peers

// The longest time between two consecutive metrics lines of peer i (seconds).
double LongestGap(const FaultCluster& c, int i) {
  double gap = 0;
  const auto& m = c.Metrics(i);
  for (size_t k = 1; k < m.size(); ++k) gap = std::max(gap, m[k].seen_s - m[k - 1].seen_s);
  return gap;
}

// The command docs/fault-tolerance.md runs on every host to make the peers re-read
// their hosts file: the quoted part of its `parallel-ssh -h vps.txt '...'` line with
// `pkill -HUP`.
std::string ReadmeSighupCommand() {
  const std::string readme =
      rt::testing::ReadFile(std::string(RINGTRAIN_SOURCE_DIR) + "/docs/fault-tolerance.md");
  const std::string start = "parallel-ssh -h vps.txt '";
  for (size_t at = readme.find(start); at != std::string::npos; at = readme.find(start, at + 1)) {
    const size_t begin = at + start.size();
    const size_t end = readme.find('\'', begin);
    if (end == std::string::npos) break;
    const std::string command = readme.substr(begin, end - begin);
    if (command.find("pkill -HUP") != std::string::npos) return command;
  }
  return "";
}

// SIGHUP to peers `who`: the documented command on each peer's host when the peers run
// in PID namespaces (root), else a signal to each.
void SignalHostsChanged(FaultCluster& c, const std::vector<int>& who, bool pid_namespaces) {
  const std::string command = ReadmeSighupCommand();
  REQUIRE_MESSAGE(!command.empty(), "docs/fault-tolerance.md has no `parallel-ssh -h vps.txt 'pkill -HUP ...'`");
  REQUIRE(command.find('\'') == std::string::npos);
  for (int i : who) {
    if (pid_namespaces) {
      CHECK_MESSAGE(c.RunOnHost(i, command) == 0, "`" << command << "` on peer " << i << "'s host");
    } else {
      c.Signal(i, SIGHUP);
    }
  }
}

}  // namespace

TEST_CASE("fault: grow 3 -> 4 peers by a hosts-file line and SIGHUP, then shrink back") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  std::mt19937_64 rng = SeededRng("grow and shrink");
  const auto args_for = [&](int64_t steps) {
    return TinyTrainArgs(tmp / "data", static_cast<int>(steps), kGlobalBatch);
  };
  const std::vector<std::string> args = args_for(kUntilStopped);
  const int base = TestBasePort();

  FaultCluster c(tmp / "run", 4, args, base + 10);
  const bool pid_namespaces = geteuid() == 0;
  if (pid_namespaces) {
    c.UsePidNamespaces();
  } else {
    MESSAGE("not root: SIGHUP by kill(2), not by the documented pkill line in PID namespaces");
  }
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 5 && c.LastStep(2) >= 5; }, 90),
                  c.Dump());
  Pause(c, std::uniform_real_distribution<double>(0.3, 2.0)(rng));

  // Grow: the edited file is copied everywhere (the new host too), peers signalled.
  c.WriteHostsAll({0, 1, 2, 3});
  SignalHostsChanged(c, {0, 1, 2}, pid_namespaces);
  const double t_start = NowS();
  c.Start(3);
  const double joined = WaitRejoined(c, 3, 0, t_start, 60);
  REQUIRE_MESSAGE(joined >= 0, "the 4th peer did not join\n" << c.Dump());
  std::printf("fault figure: new hosts-file entry started -> joined and training = %.3f s\n",
              joined);
  REQUIRE(c.WaitUntil([&] { return c.Metrics(0).back().peers == 4; }, 10));
  CHECK(c.Metrics(3).front().peers == 4);
  Pause(c, 2.0);
  CHECK(c.Metrics(3).back().step > c.Metrics(3).front().step + 3);

  // Shrink: its line is removed from every copy; every peer is signalled.
  c.WriteHostsAll({0, 1, 2});
  SignalHostsChanged(c, {0, 1, 2, 3}, pid_namespaces);
  const std::optional<int> left = c.WaitExit(3, 30);
  REQUIRE_MESSAGE(left.has_value(), "the removed peer did not leave\n" << c.Dump());
  CHECK_MESSAGE(*left == 0, "the removed peer exited with " << *left << "\n" << c.Dump());
  CHECK_MESSAGE(c.Logs(3).find("removed from the hosts file") != std::string::npos, c.Dump());
  REQUIRE(c.WaitUntil([&] { return c.Metrics(0).back().peers == 3; }, 10));
  const int64_t at = c.LastStep(0);
  Pause(c, 1.0);
  CHECK(c.LastStep(0) > at);
  for (int i = 0; i < 3; ++i) {
    const double gap = LongestGap(c, i);
    std::printf(
        "fault figure: longest pause between steps of peer %d while growing/shrinking = "
        "%.3f s\n",
        i, gap);
    CHECK(gap < 10.0);
  }
  StopAndCompareWithUninterrupted(c, {0, 1, 2}, tmp / "ref", 3, args_for, base);
}
