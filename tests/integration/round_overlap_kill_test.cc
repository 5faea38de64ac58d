// Round sync with overlap under a kill -9 (3 loopback `ringtrain train --hosts` peers, a
// tiny model, --outer-every 4, int8): a peer dies while a round's exchange runs beside
// the next round's inner steps; the two survivors redo that exchange among themselves at
// the round's end, go on training and, stopped by SIGTERM, end at the same round's end
// with one param_hash; at every round's end both reported in the same view, their
// hashes agree. Bounded (~1 min); the harness kills every peer it started.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

}  // namespace

TEST_CASE("round overlap: kill -9 during an overlapped exchange, the survivors redo it and agree") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  constexpr int kEvery = 4;
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", kUntilStopped, 24);
  for (const char* a : {"--outer-every=4", "--outer-compress=int8", "--outer-overlap=on",
                        "--bucket-mb=0.02", "--ckpt-every=1000000"}) {
    args.push_back(a);
  }
  FaultCluster c(tmp / "run", 3, args, TestBasePort() + 30);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  // Past two rounds' ends: an exchange is in flight from then on, except at the instant of
  // a round's end itself.
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 2 * kEvery + 2; }, 90), c.Dump());
  const int64_t killed_at = c.LastStep(0);
  c.Kill9(2);
  MESSAGE("kill -9 of peer 2 at step " << killed_at);
  // The survivors train on as a ring of 2 for two more rounds.
  REQUIRE_MESSAGE(c.WaitUntil(
                      [&] {
                        return !c.Metrics(0).empty() && c.Metrics(0).back().peers == 2 &&
                               c.LastStep(0) >= killed_at + 3 * kEvery &&
                               c.LastStep(1) >= killed_at + 3 * kEvery;
                      },
                      60),
                  c.Dump());
  c.Signal(0, SIGTERM);
  for (int i : {0, 1}) {
    std::optional<int> code = c.WaitExit(i, 60);
    REQUIRE_MESSAGE(code.has_value(), "peer " << i << " did not stop\n" << c.Dump());
    CHECK_MESSAGE(*code == 0, "peer " << i << " exit " << *code << "\n" << c.Dump());
  }
  c.Poll();
  const Metric& last0 = c.Metrics(0).back();
  const Metric& last1 = c.Metrics(1).back();
  CHECK(last0.step % kEvery == 0);  // a round's end
  CHECK(last1.step == last0.step);
  CHECK(last1.hash == last0.hash);
  CHECK(last0.peers == 2);
  // The exchange that was in flight when peer 2 died was redone by the two survivors.
  CHECK_MESSAGE(c.Logs(0).find("exchange is redone among 2 peers") != std::string::npos,
                c.Dump(60));
  // At every round's end both survivors reported in the same view, one hash.
  std::map<std::pair<uint64_t, int64_t>, std::string> at;
  int compared = 0;
  for (int i : {0, 1}) {
    for (const Metric& m : c.Metrics(i)) {
      if (m.step % kEvery != 0) continue;
      auto [it, fresh] = at.emplace(std::make_pair(m.epoch, m.step), m.hash);
      if (fresh) continue;
      ++compared;
      CHECK_MESSAGE(it->second == m.hash, "epoch " << m.epoch << " step " << m.step);
    }
  }
  CHECK(compared >= 3);
}
