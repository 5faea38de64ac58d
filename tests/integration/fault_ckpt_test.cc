// Kill -9 of the leader while it writes a checkpoint. The
// harness watches the leader's checkpoint directory (inotify) and kills it the
// moment a temporary checkpoint directory appears. The survivors carry on under a
// new leader; the half-written checkpoint is never taken as valid (the newest valid
// one opens); the killed leader restarts, rejoins, and every peer ends at the last
// step with one param_hash and the loss of an uninterrupted run. Bounded (~1-2 min).
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

// Names of the entries of `dir` that start with ".tmp-".
std::vector<std::string> TempEntries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0) out.push_back(name);
  }
  return out;
}

}  // namespace

TEST_CASE("fault: kill -9 of the leader while it writes a checkpoint") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const auto args_for = [&](int64_t steps) {
    std::vector<std::string> a = TinyTrainArgs(tmp / "data", static_cast<int>(steps), 24);
    a.push_back("--ckpt-every=40");
    return a;
  };
  const std::vector<std::string> args = args_for(kUntilStopped);
  const int base = TestBasePort();

  FaultCluster c(tmp / "run", 3, args, base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) ::mkdir(c.CkptDir(i).c_str(), 0755);
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(inotify_add_watch(fd, c.CkptDir(0).c_str(), IN_CREATE | IN_MOVED_TO) >= 0);
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(1) >= 50; }, 90), c.Dump());
  // Drop the events of the checkpoints written so far; kill at the next one's start.
  alignas(inotify_event) char buf[4096];
  while (read(fd, buf, sizeof(buf)) > 0) {
  }
  c.Poll();
  const uint64_t epoch = c.LastEpoch(1);
  double t_kill = -1;
  std::string caught;
  const double end = NowS() + 60;
  while (t_kill < 0 && NowS() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof(buf));
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      const std::string name = ev->len > 0 ? std::string(ev->name) : std::string();
      if ((ev->mask & IN_CREATE) && name.rfind(".tmp-", 0) == 0 && t_kill < 0) {
        t_kill = c.Kill9(0);
        caught = name;
      }
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  close(fd);
  REQUIRE_MESSAGE(t_kill >= 0, "the leader wrote no checkpoint within 60 s\n" << c.Dump());
  const bool mid_write = !TempEntries(c.CkptDir(0)).empty();
  const std::string what = "killed the leader at the start of " + caught +
                           "; left half-written: " + (mid_write ? "yes" : "no (it finished)");
  MESSAGE(what);
  // What the killed leader left is never taken for a valid checkpoint.
  std::vector<std::string> problems;
  auto latest = rt::ckpt::OpenLatestValidCheckpoint(c.CkptDir(0), &problems);
  REQUIRE_MESSAGE(latest.ok(), latest.status().ToString());

  const FailureFigures f = WaitTrainingAgain(c, 1, t_kill, epoch, 30);
  REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
  std::printf("fault figure: leader killed mid-checkpoint -> training again = %.3f s\n",
              f.to_training_s);
  CHECK(f.steps_lost <= 1);

  Pause(c, 2.0);
  const size_t before = c.MetricCount(0);
  const double t_start = NowS();
  c.Start(0);
  const double rejoin = WaitRejoined(c, 0, before, t_start, 60);
  REQUIRE_MESSAGE(rejoin >= 0, "the old leader did not rejoin\n" << c.Dump());
  Pause(c, 1.0);
  StopAndCompareWithUninterrupted(c, {0, 1, 2}, tmp / "ref", 3, args_for, base);
  const int64_t last = c.Metrics(0).back().step;
  // The final checkpoint exists on two machines (the leader and its successor), and
  // the half-written directory of the kill is gone (cleaned) or ignored.
  int valid = 0;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> p;
    auto ck = rt::ckpt::OpenLatestValidCheckpoint(c.CkptDir(i), &p);
    if (ck.ok() && ck->meta().step == last) ++valid;
  }
  CHECK_MESSAGE(valid >= 2, c.Dump());
}
