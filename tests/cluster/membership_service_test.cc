// MembershipService over real loopback sockets: forming a view, a peer killed (its
// sockets close) or gone silent, the leader killed, a restart rejoining, a clean
// leave, a 2+2 partition pausing both sides, hosts-file edits (a new entry joins,
// a removed one leaves, disagreeing files change nothing). Each scenario is bounded
// to seconds.
#include "cluster/membership_service.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "cluster/service_test_util.h"
#include "cluster/state_transfer.h"
#include "core/clock.h"

namespace rt::cluster {
namespace {

using testing::LoopbackCluster;
using testing::ServiceTimeouts;

using testing::kSlow;
absl::Duration Bound(double seconds) { return absl::Seconds(seconds * kSlow); }

// Milliseconds until every peer of `who` trains in a view of exactly `who` whose
// epoch is above `epoch`; -1 on timeout.
double MsUntilNewView(LoopbackCluster& c, const std::vector<int>& who, uint64_t epoch,
                      absl::Duration timeout) {
  Stopwatch w;
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (c.TrainingTogether(who) && c.S(who[0]).view().epoch > epoch) return w.ElapsedMs();
    absl::SleepFor(absl::Milliseconds(1));
  }
  return -1;
}

// The simulated trainer: the members of peer `lead`'s installed view take a step every
// 10 ms while they train together (admissions happen at step boundaries), until
// done() or the timeout. True if done() held.
bool DriveSteps(LoopbackCluster& c, int lead, int64_t* step, const std::function<bool()>& done,
                absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (!done() && absl::Now() < end) {
    const View v = c.S(lead).view();
    std::vector<int> members;
    for (int i = 0; i < c.size(); ++i) {
      if (c.Live(i) && v.Contains(c.Id(i))) members.push_back(i);
    }
    if (!members.empty() && c.TrainingTogether(members)) {
      ++*step;
      for (int i : members) c.S(i).StepCompleted({v.epoch, *step});
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

TEST_CASE("ring channels differ between views, also of the same epoch") {
  const View a{3, {"h0:1", "h1:1"}}, b{3, {"h0:1", "h2:1"}}, c{4, {"h0:1", "h1:1"}};
  CHECK(RingChannel(a) == RingChannel(View{3, {"h0:1", "h1:1"}}));
  CHECK(RingChannel(a) != RingChannel(b));
  CHECK(RingChannel(a) != RingChannel(c));
  CHECK(RingChannel(a) != kControlChannel);
}

TEST_CASE("three services form one view with quorum and the same leader") {
  LoopbackCluster c(3);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const View v = c.S(0).view();
  CHECK(v.epoch >= 1);
  CHECK(v.leader() == c.Id(0));
  CHECK(v.members == std::vector<PeerId>{c.Id(0), c.Id(1), c.Id(2)});
  for (int i = 0; i < 3; ++i) {
    CHECK(c.S(i).phase() == Membership::Phase::kMember);
    // Each peer was told to install the view, with the agreed resume point.
    bool installed = false;
    while (auto d = c.S(i).NextDecision(absl::ZeroDuration())) {
      if (d->kind == Decision::kInstallView && d->view == v) {
        installed = true;
        CHECK(d->agreement.resume == StateVersion{0, 0});
        CHECK_FALSE(d->need_state);
      }
    }
    CHECK(installed);
  }
}

TEST_CASE("a killed member is removed in a new view -- it restarts and rejoins with state") {
  LoopbackCluster c(4);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2, 3}, Bound(5)), c.Dump());
  const View v1 = c.S(0).view();
  // Five steps everywhere, then rank 2 dies mid-step 6 (only ranks 0 and 1 finished it).
  for (int64_t s = 1; s <= 5; ++s) {
    for (int i = 0; i < 4; ++i) c.S(i).StepCompleted({v1.epoch, s});
  }
  c.S(0).StepCompleted({v1.epoch, 6});
  c.S(1).StepCompleted({v1.epoch, 6});
  absl::SleepFor(absl::Milliseconds(20));
  c.Kill(2);
  const double ms = MsUntilNewView(c, {0, 1, 3}, v1.epoch, Bound(3));
  REQUIRE_MESSAGE(ms >= 0, c.Dump());
  MESSAGE("killed member (sockets closed) -> new view in " << ms << " ms");
  const View v2 = c.S(0).view();
  CHECK(v2.epoch > v1.epoch);
  CHECK(v2.leader() == c.Id(0));
  // Survivors resume from the newest step anyone completed; rank 3 must fetch it.
  std::optional<Decision> install;
  while (auto d = c.S(3).NextDecision(absl::ZeroDuration())) {
    if (d->kind == Decision::kInstallView && d->view == v2) install = d;
  }
  REQUIRE(install.has_value());
  CHECK(install->agreement.resume == StateVersion{v1.epoch, 6});
  CHECK(install->agreement.source == c.Id(0));
  CHECK(install->need_state);
  c.S(3).SetState({v1.epoch, 6});

  // Restarted with nothing: admitted at the next step boundary in a new view and
  // told to fetch the state, which it does from the source over a real transfer.
  Stopwatch rejoin;
  c.Start(2, {0, -1});
  int64_t step = 6;
  const absl::Time end = absl::Now() + Bound(5);
  while (!c.TrainingTogether({0, 1, 2, 3}) && absl::Now() < end) {
    // The simulated trainer: like the real one, the members of the installed view
    // take a step every 10 ms while they train together (if another view change
    // happens meanwhile, training goes on in the new view; the joiner is admitted
    // at a step boundary, so a trainer that stopped would never admit it).
    const View v = c.S(0).view();
    std::vector<int> members;
    for (int i = 0; i < c.size(); ++i) {
      if (c.Live(i) && v.Contains(c.Id(i))) members.push_back(i);
    }
    if (!members.empty() && c.TrainingTogether(members)) {
      ++step;
      for (int i : members) c.S(i).StepCompleted({v.epoch, step});
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  REQUIRE_MESSAGE(c.TrainingTogether({0, 1, 2, 3}), c.Dump());
  MESSAGE("restarted member admitted (10 ms steps) in " << rejoin.ElapsedMs() << " ms");
  const View v3 = c.S(2).view();
  CHECK(v3.epoch > v2.epoch);
  // The view that admitted it ordered the fetch (on a loaded host another view
  // change may follow; the trainer handles decisions in order, so does this test).
  std::optional<Decision> joined, served;
  while (auto d = c.S(2).NextDecision(absl::ZeroDuration())) {
    if (d->kind == Decision::kInstallView && !joined) joined = d;
  }
  REQUIRE(joined.has_value());
  while (auto d = c.S(0).NextDecision(absl::ZeroDuration())) {
    if (d->kind == Decision::kInstallView && d->view == joined->view) served = d;
  }
  REQUIRE(joined.has_value());
  REQUIRE(served.has_value());
  CHECK(joined->need_state);
  CHECK(joined->agreement.source == c.Id(0));
  CHECK(joined->agreement.resume.epoch >= v2.epoch);
  CHECK(joined->agreement.resume.step > 6);
  CHECK(joined->agreement.resume.step <= step);
  const auto& need = served->agreement.need_state;
  CHECK(std::find(need.begin(), need.end(), c.Id(2)) != need.end());
  // The source serves its snapshot; the joiner fetches exactly the agreed version.
  const std::vector<uint8_t> weights(100000, 7);
  StateSource src{served->agreement.resume, {{"params", weights}}};
  absl::Status serve_status;
  std::thread server([&] { serve_status = ServeAgreedState(c.Node(0), *served, src); });
  auto got = FetchAgreedState(c.Node(2), *joined);
  server.join();
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(got->Find("params")->bytes == weights);
  // Other lagging members (if any) did not fetch here: the source reports them.
  if (served->agreement.need_state.size() == 1) CHECK(serve_status.ok());
  c.S(2).SetState(got->version);
}

TEST_CASE("killing the leader elects the lowest live rank") {
  LoopbackCluster c(3);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const uint64_t e = c.S(1).view().epoch;
  c.Kill(0);
  const double ms = MsUntilNewView(c, {1, 2}, e, Bound(3));
  REQUIRE_MESSAGE(ms >= 0, c.Dump());
  MESSAGE("killed leader (sockets closed) -> new leader in " << ms << " ms");
  CHECK(c.S(2).view().leader() == c.Id(1));
  // The old leader returns: it is admitted and leads again (lowest rank).
  c.Start(0);
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  CHECK(c.S(2).view().leader() == c.Id(0));
}

TEST_CASE("a silent member is removed after the peer timeout") {
  ServiceTimeouts t;
  LoopbackCluster c(3, t);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const uint64_t e = c.S(0).view().epoch;
  absl::SleepFor(absl::Milliseconds(3 * t.heartbeat_interval_ms));  // all heartbeat the view
  c.Partition({2});  // rank 2 hears nothing and is heard by nobody; sockets stay open
  const double ms = MsUntilNewView(c, {0, 1}, e, Bound(3));
  REQUIRE_MESSAGE(ms >= 0, c.Dump());
  MESSAGE("silent member -> new view in " << ms << " ms (peer timeout " << t.peer_timeout_ms
                                          << " ms)");
  CHECK(ms >= static_cast<double>(t.peer_timeout_ms) * 0.5);
  // The silent peer paused: alone it has no quorum, and it must not train.
  CHECK_MESSAGE(c.S(2).WaitFor([](const View&, bool train) { return !train; }, Bound(2)), c.Dump());
  c.Heal();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
}

TEST_CASE("a 2+2 split pauses both sides -- healed, they train together again") {
  LoopbackCluster c(4);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2, 3}, Bound(5)), c.Dump());
  c.Partition({0, 1});
  for (int i = 0; i < 4; ++i) {
    CHECK_MESSAGE(c.S(i).WaitFor([](const View&, bool train) { return !train; }, Bound(3)),
                  c.Dump());
  }
  // Stays paused: no side ever regains quorum while split.
  absl::SleepFor(absl::Milliseconds(400));
  for (int i = 0; i < 4; ++i) {
    CHECK_FALSE(c.S(i).CanTrain());
  }
  // The acting leader of each side (the lowest rank there) says that quorum is missing.
  for (int i : {0, 2}) {
    const absl::Time end = absl::Now() + Bound(2);
    while (c.S(i).pause_reason().find("quorum") == std::string::npos && absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    CHECK_MESSAGE(c.S(i).pause_reason().find("quorum") != std::string::npos, c.Dump());
  }
  c.Heal();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2, 3}, Bound(6)), c.Dump());
}

TEST_CASE("a peer that leaves is removed at once, without waiting for a timeout") {
  ServiceTimeouts t;
  t.peer_timeout_ms = 5000;  // a timeout would be far too slow for the bound below
  LoopbackCluster c(3, t);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const uint64_t e = c.S(0).view().epoch;
  c.S(2).Leave("stopping (SIGTERM)");
  const double ms = MsUntilNewView(c, {0, 1}, e, Bound(2));
  REQUIRE_MESSAGE(ms >= 0, c.Dump());
  CHECK(ms < 2000);
  CHECK(c.S(2).phase() == Membership::Phase::kLeft);
}

TEST_CASE("a bad hosts file is refused with its error and changes nothing") {
  LoopbackCluster c(1);
  c.Start(0);
  const absl::Status st = c.S(0).HostsFileChanged("/nonexistent/ringtrain-hosts");
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("ringtrain-hosts") != std::string::npos);
  CHECK(c.S(0).agreed_hosts() == std::vector<PeerId>{c.Id(0)});
}

TEST_CASE("hosts-file growth: a new entry in every file joins with state -- removed, it leaves") {
  LoopbackCluster c(4);
  c.SetStartFile({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const uint64_t e1 = c.S(0).view().epoch;
  int64_t step = 0;
  for (int i = 0; i < 3; ++i) c.S(i).HostsChanged(c.Ids({0, 1, 2, 3}));
  c.SetStartFile({0, 1, 2, 3});
  Stopwatch join;
  c.Start(3, {0, -1});
  REQUIRE_MESSAGE(DriveSteps(
                      c, 0, &step,
                      [&] {
                        return c.TrainingTogether({0, 1, 2, 3});
                      },
                      Bound(8)),
                  c.Dump());
  MESSAGE("new hosts-file entry admitted (10 ms steps) in " << join.ElapsedMs() << " ms");
  CHECK(c.S(3).view().epoch > e1);
  CHECK(c.S(0).agreed_hosts() == c.Ids({0, 1, 2, 3}));
  CHECK(c.Node(0)->RankOf(c.Id(3)) == 3);  // a new slot of the node started with 3 hosts
  // The admitting view orders a fetch from a member; the state crosses the new link.
  std::optional<Decision> joined;
  while (auto d = c.S(3).NextDecision(absl::ZeroDuration())) {
    if (d->kind == Decision::kInstallView && !joined) joined = d;
  }
  REQUIRE(joined.has_value());
  CHECK(joined->need_state);
  const int source = RankOf(c.Ids({0, 1, 2}), joined->agreement.source);
  REQUIRE(source >= 0);
  const std::vector<uint8_t> weights(50000, 3);
  StateSource src{joined->agreement.resume, {{"params", weights}}};
  const uint64_t channel = StateChannel(joined->view.epoch) ^ 0x99;
  absl::Status served;
  std::thread server(
      [&] { served = ServeState(c.Node(source), c.Node(source)->RankOf(c.Id(3)), channel, src); });
  auto got = FetchState(c.Node(3), c.Node(3)->RankOf(joined->agreement.source), channel,
                        joined->agreement.resume);
  server.join();
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  CHECK(served.ok());
  CHECK(got->Find("params")->bytes == weights);
  c.S(3).SetState(got->version);

  // Shrinking: the entry is removed from every copy (its own too). It leaves at a
  // step boundary and its links are dropped.
  const uint64_t e2 = c.S(0).view().epoch;
  for (int i = 0; i < 4; ++i) c.S(i).HostsChanged(c.Ids({0, 1, 2}));
  REQUIRE_MESSAGE(DriveSteps(
                      c, 0, &step,
                      [&] {
                        return c.TrainingTogether({0, 1, 2}) && c.S(0).view().epoch > e2 &&
                               c.S(3).phase() == Membership::Phase::kLeft;
                      },
                      Bound(8)),
                  c.Dump());
  bool leave = false;
  while (auto d = c.S(3).NextDecision(absl::ZeroDuration())) leave |= d->kind == Decision::kLeave;
  CHECK(leave);
  CHECK_FALSE(c.S(0).view().Contains(c.Id(3)));
  const absl::Time end = absl::Now() + Bound(2);
  while (c.Node(0)->RankOf(c.Id(3)) >= 0 && absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  CHECK(c.Node(0)->RankOf(c.Id(3)) == -1);
  // Training goes on without it.
  const int64_t before = step;
  DriveSteps(
      c, 0, &step, [&] { return step >= before + 5; }, Bound(2));
  CHECK(step >= before + 5);
  CHECK(c.TrainingTogether({0, 1, 2}));
}

TEST_CASE("hosts files that disagree keep the last agreed view, then agree and admit") {
  LoopbackCluster c(4);
  c.SetStartFile({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  const View v1 = c.S(0).view();
  int64_t step = 0;
  // Only two of three copies were edited.
  for (int i = 0; i < 2; ++i) c.S(i).HostsChanged(c.Ids({0, 1, 2, 3}));
  c.SetStartFile({0, 1, 2, 3});
  c.Start(3, {0, -1});
  DriveSteps(
      c, 0, &step, [] { return false; }, absl::Milliseconds(1200));
  CHECK_MESSAGE(c.TrainingTogether({0, 1, 2}), c.Dump());
  CHECK(c.S(0).view() == v1);
  CHECK(step > 10);  // training never stopped
  CHECK(c.S(0).agreed_hosts() == c.Ids({0, 1, 2}));
  CHECK(c.Node(0)->RankOf(c.Id(3)) == -1);  // not linked before the file is agreed
  CHECK_FALSE(c.S(3).CanTrain());
  bool warned = false;
  for (int i : {0, 2}) {
    while (auto d = c.S(i).NextDecision(absl::ZeroDuration())) {
      warned |= d->kind == Decision::kWarning && d->reason.find("differs") != std::string::npos;
    }
  }
  CHECK(warned);
  // The last copy is edited: now the file is agreed and the new entry joins.
  c.S(2).HostsChanged(c.Ids({0, 1, 2, 3}));
  REQUIRE_MESSAGE(DriveSteps(
                      c, 0, &step,
                      [&] {
                        return c.TrainingTogether({0, 1, 2, 3});
                      },
                      Bound(8)),
                  c.Dump());
}

// The figures of the report, with the default timeouts of MembershipServiceOptions.
TEST_CASE("figures with the default timeouts: kill and silence to new view, new leader") {
  MembershipServiceOptions defaults;
  ServiceTimeouts t;
  t.peer_timeout_ms = defaults.peer_timeout_ms;
  t.heartbeat_interval_ms = defaults.heartbeat_interval_ms;
  t.proposal_timeout_ms = defaults.proposal_timeout_ms;
  t.startup_grace_ms = defaults.startup_grace_ms;
  LoopbackCluster c(5, t);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2, 3, 4}, Bound(5)), c.Dump());
  uint64_t e = c.S(0).view().epoch;
  c.Kill(0);  // the leader, sockets closed
  const double leader_ms = MsUntilNewView(c, {1, 2, 3, 4}, e, Bound(5));
  REQUIRE_MESSAGE(leader_ms >= 0, c.Dump());
  CHECK(c.S(1).view().leader() == c.Id(1));
  e = c.S(1).view().epoch;
  absl::SleepFor(absl::Milliseconds(3 * t.heartbeat_interval_ms));  // all heartbeat the view
  c.Partition({4});  // silent: needs the peer timeout
  const double silent_ms = MsUntilNewView(c, {1, 2, 3}, e, Bound(4 + t.peer_timeout_ms / 1000.0));
  REQUIRE_MESSAGE(silent_ms >= 0, c.Dump());
  std::printf(
      "membership figures (defaults: peer timeout %lld ms, heartbeat %lld ms): leader killed -> "
      "new view with new leader %.0f ms; member silent -> new view %.0f ms\n",
      static_cast<long long>(t.peer_timeout_ms), static_cast<long long>(t.heartbeat_interval_ms),
      leader_ms, silent_ms);
  CHECK(leader_ms < 5000);
  CHECK(silent_ms < 10000);
}

}  // namespace
}  // namespace rt::cluster

namespace rt::cluster {

TEST_CASE("status reports ride on heartbeats: changed ones arrive, a killed peer is not alive") {
  LoopbackCluster c(3);
  c.StartAll();
  REQUIRE_MESSAGE(c.WaitTrainingTogether({0, 1, 2}, Bound(5)), c.Dump());
  // The report of peer 1 as peer `at` sees it ("" until it arrived).
  auto report_at = [&](int at, int from) {
    for (const RemoteReport& r : c.S(at).PeerReports()) {
      if (r.peer == c.Id(from)) return std::string(r.report.begin(), r.report.end());
    }
    return std::string();
  };
  auto wait_for = [&](const std::function<bool()>& pred) {
    const absl::Time end = absl::Now() + Bound(5);
    while (!pred() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
    return pred();
  };
  c.S(1).SetLocalReport({'f', 'i', 'r', 's', 't'});
  CHECK(wait_for([&] { return report_at(0, 1) == "first" && report_at(2, 1) == "first"; }));
  c.S(1).SetLocalReport({'s', 'e', 'c', 'o', 'n', 'd'});
  CHECK(wait_for([&] { return report_at(0, 1) == "second" && report_at(2, 1) == "second"; }));
  // A report above the bound is not sent; the last good one stays.
  c.S(1).SetLocalReport(std::vector<uint8_t>(kMaxReportBytes + 1, 'x'));
  absl::SleepFor(absl::Milliseconds(200));
  CHECK(report_at(0, 1) == "second");
  for (const RemoteReport& r : c.S(0).PeerReports()) {
    CHECK(r.alive);
    CHECK(r.in_view);
    if (r.peer == c.Id(1)) CHECK(r.age_ms >= 0);
  }
  c.Kill(1);
  CHECK(wait_for([&] {
    for (const RemoteReport& r : c.S(0).PeerReports()) {
      if (r.peer == c.Id(1)) return !r.alive;
    }
    return false;
  }));
}

}  // namespace rt::cluster
