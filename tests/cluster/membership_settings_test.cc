// Membership with peers of other settings and at the end of a job, in
// simulated clusters: the odd peer leaves at once while the others wait and say why;
// a training view never leaves for a newcomer; members that finish tell the others,
// who finish too without suspecting or pausing. Deterministic, like membership_test.cc.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cluster/membership.h"
#include "cluster/sim_cluster.h"

namespace rt::cluster {
namespace {

using testing::LogHas;
using testing::SameState;
using testing::SimCluster;
using testing::SimOptions;

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("settings: of two differing peers the lower-ranked one's stay, the other exits at once") {
  SimCluster c(2, SimOptions{});
  c.SetConfig(1, 7);
  c.StartAll();
  // Both hosts answered at once: no need to wait for the startup grace (500 ms).
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.Exited(1); }, 300), c.Dump());
  CHECK(LogHas(c,
               "h1:29500 config-mismatch h0:29500 this peer's settings differ from those of "
               "h0:29500 (1 peer against 1 with this peer's; on a tie the lowest-ranked peer's "
               "stay), so this peer leaves; what differs: layers: here '7', there '0'"));
  // The other keeps waiting and names the refused peer's setting.
  c.Run(200);
  REQUIRE(c.Live(0));
  CHECK(Has(c.M(0).pause_reason(), "no quorum"));
  CHECK(Has(c.M(0).pause_reason(),
            "refused for other settings: h1:29500 (layers: here '0', there '7')"));
  // Restarted with the right settings, it joins and both train.
  c.SetConfig(1, 0);
  c.Start(1);
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({0, 1}); }, 1000), c.Dump());
  CHECK_FALSE(Has(c.M(0).pause_reason(), "refused"));
}

TEST_CASE("settings: a refusal that is not repeated is forgotten (the refused peer exited)") {
  SimOptions o;
  o.refusal_ttl_ms = 2000;
  SimCluster c(2, o);
  c.SetConfig(1, 7);
  c.StartAll();
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.Exited(1); }, 300), c.Dump());
  c.Run(100);
  CHECK(Has(c.M(0).pause_reason(), "refused for other settings: h1:29500"));
  c.Run(o.refusal_ttl_ms + 200);
  CHECK(Has(c.M(0).pause_reason(), "no quorum"));
  CHECK_FALSE(Has(c.M(0).pause_reason(), "refused"));
}

TEST_CASE("settings: the majority's stay, even against the lowest rank") {
  SimCluster c(3, SimOptions{});
  c.SetConfig(0, 7);
  c.StartAll();
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.Exited(0); }, 300), c.Dump());
  CHECK(LogHas(c,
               "h0:29500 config-mismatch h1:29500 this peer's settings differ from those of "
               "h1:29500 h2:29500 (2 peers against 1 with this peer's)"));
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({1, 2}); }, 2000), c.Dump());
}

TEST_CASE("settings: a tie waits for the hosts still missing (the startup grace)") {
  SimOptions o;
  SimCluster c(3, o);
  c.SetConfig(1, 7);
  c.Start(0);
  c.Start(1);
  // Host 2 might still come with peer 1's settings: nobody decides before the grace.
  c.Run(o.startup_grace_ms - 100);
  CHECK(c.Live(0));
  CHECK(c.Live(1));
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.Exited(1); }, 300), c.Dump());
  CHECK(c.Live(0));
  c.Start(2);
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({0, 2}); }, 2000), c.Dump());
}

TEST_CASE("settings: a member of a training view never leaves for a newcomer's settings") {
  SimOptions o;
  o.min_peers = 1;
  SimCluster c(3, o);
  c.Start(0);
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({0}); }, 2000), c.Dump());
  // Host 1 is missing: the newcomer waits for the grace, then loses the tie (rank).
  c.SetConfig(2, 5);
  c.Start(2);
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.Exited(2); }, 1000), c.Dump());
  const int64_t step = c.State(0).version.step;
  c.Run(500);
  CHECK(c.Training(0));
  CHECK(c.State(0).version.step > step);

  // Direct: a member that keeps being refused by a lower-ranked peer (it would win a
  // tie while forming) trains on.
  const std::vector<PeerId> hosts = {"h0:1", "h1:1"};
  MembershipConfig cfg;
  cfg.self = hosts[1];
  cfg.hosts = hosts;
  cfg.min_peers = 1;
  cfg.peer_timeout_ms = 1000;
  cfg.heartbeat_interval_ms = 100;
  cfg.proposal_timeout_ms = 300;
  cfg.startup_grace_ms = 500;
  int64_t now = 0;
  Membership m(cfg, now);
  for (now = 0; now <= 600 && !m.CanTrain(); now += 10) m.OnTick(now);
  REQUIRE(m.CanTrain());  // alone after the grace (min_peers 1)
  for (int i = 0; i < 20; ++i) {
    m.OnConfigRefused(hosts[0], 9, "layers: here '2', there '3'", now += 100);
    m.OnTick(now);
  }
  for (const Decision& d : m.TakeDecisions()) CHECK(d.kind != Decision::kConfigMismatch);
  CHECK(m.CanTrain());
}

TEST_CASE("ending: members that finish the job leave cleanly, nobody suspects or pauses") {
  SimOptions o;
  o.end_step = 12;
  o.end_lag_ms = 120;  // longer than a tick: the others still run their last step
  SimCluster c(3, o);
  c.StartAll();
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({0, 1, 2}); }, 1000), c.Dump());
  const size_t training_log = c.Log().size();  // waiting for each other at start is normal
  REQUIRE_MESSAGE(c.RunUntil(
                      [&] {
                        return c.M(0).phase() == Membership::Phase::kLeft &&
                               c.M(1).phase() == Membership::Phase::kLeft &&
                               c.M(2).phase() == Membership::Phase::kLeft;
                      },
                      3000),
                  c.Dump());
  c.Run(100);  // the last Leaves arrive (the processes still write their checkpoints)
  const size_t ended_log = c.Log().size();
  // The processes exit: links break, nobody is left to care.
  for (int i = 0; i < 3; ++i) c.Kill(i);
  c.Run(300);
  CHECK(c.Log().size() == ended_log);
  int left = 0;
  for (size_t k = training_log; k < c.Log().size(); ++k) {
    const std::string& l = c.Log()[k];
    CHECK_MESSAGE(!Has(l, " pause "), l);
    CHECK_MESSAGE(!Has(l, " suspect "), l);
    CHECK_MESSAGE(!Has(l, " stop-training "), l);
    if (Has(l, " peer-left ")) {
      CHECK(Has(l, "finished training at step 12"));
      ++left;
    }
  }
  CHECK(left == 6);  // each peer hears of both others
  CHECK(c.State(0).version.step == 12);
  CHECK(SameState(c, {0, 1, 2}));
}

TEST_CASE("ending: a member that leaves alone is re-formed around, logged as a leave") {
  SimCluster c(3, SimOptions{});
  c.StartAll();
  REQUIRE(c.RunUntil([&] { return c.AllTrainingTogether({0, 1, 2}); }, 1000));
  c.M(2).AnnounceLeave("left: stop requested (signal)", c.now());
  REQUIRE_MESSAGE(c.RunUntil([&] { return c.AllTrainingTogether({0, 1}); }, 1000), c.Dump());
  CHECK(LogHas(c, "h0:29500 peer-left h2:29500 left: stop requested (signal)"));
  CHECK_FALSE(LogHas(c, "suspect h2:29500"));
}

}  // namespace rt::cluster
