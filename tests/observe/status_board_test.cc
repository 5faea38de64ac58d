// The status board: decisions become events (a view change recorded by the new
// leader only, naming who left and why), reports of other peers show in snapshots and
// their events are merged, the leader writes --events, history is bounded; and the
// JSON and Prometheus renderings of a snapshot.
#include "observe/status_board.h"

#include <doctest/doctest.h>

#include "observe/json.h"
#include "observe/prometheus_text.h"
#include "observe/status_json.h"
#include "temp_dir.h"

namespace rt::observe {
namespace {

cluster::Decision Install(uint64_t epoch, std::vector<std::string> members) {
  cluster::Decision d;
  d.kind = cluster::Decision::kInstallView;
  d.view = cluster::View{epoch, std::move(members)};
  d.agreement.resume = {epoch, 10};
  return d;
}

ClusterFacts Facts(uint64_t epoch, std::vector<std::string> members,
                   std::vector<cluster::RemoteReport> peers) {
  ClusterFacts f;
  f.epoch = epoch;
  f.members = members;
  f.leader = members.front();
  f.hosts = {"a:1", "b:1", "c:1"};
  f.quorum = 2;
  f.can_train = true;
  f.phase = cluster::Membership::Phase::kMember;
  f.peers = std::move(peers);
  return f;
}

}  // namespace

TEST_CASE("view changes are recorded by the new leader, with who left and why") {
  BoardOptions o;
  o.self = "a:1";
  StatusBoard leader(o);
  o.self = "b:1";
  StatusBoard member(o);
  for (StatusBoard* b : {&leader, &member}) b->OnDecision(Install(1, {"a:1", "b:1", "c:1"}));
  cluster::Decision suspect;
  suspect.kind = cluster::Decision::kSuspect;
  suspect.peer = "c:1";
  suspect.reason = "link broken";
  for (StatusBoard* b : {&leader, &member}) {
    b->OnDecision(suspect);
    b->OnDecision(Install(2, {"a:1", "b:1"}));
  }
  const StatusSnapshot ls = leader.Snapshot();
  REQUIRE(ls.events.size() == 2);
  CHECK(ls.events[1].kind == "view_change");
  CHECK(ls.events[1].left == std::vector<std::string>{"c:1"});
  CHECK(ls.events[1].message.find("c:1 (link broken)") != std::string::npos);
  CHECK(member.Snapshot().events.empty());  // one line per view change, not one per peer

  cluster::Decision pause;
  pause.kind = cluster::Decision::kPause;
  pause.reason = "no quorum: 1 of 3 hosts reachable, 2 needed";
  member.OnDecision(pause);
  REQUIRE(member.Snapshot().events.size() == 1);
  CHECK(member.Snapshot().events[0].kind == "pause");
}

TEST_CASE("other peers' reports show in the snapshot and their events merge") {
  BoardOptions o;
  o.self = "b:1";
  StatusBoard b(o);
  o.self = "a:1";
  StatusBoard a(o);
  a.OnDecision(Install(1, {"a:1", "b:1", "c:1"}));
  StepPoint p;
  p.step = 5;
  p.loss = 4.5;
  p.tokens_per_s = 1000;
  p.step_ms = 100;
  p.compute_ms = 80;
  p.comm_ms = 20;
  p.wait_ms = 5;
  a.OnStep(p, 1, 8, 12345);
  std::vector<uint8_t> a_report;
  a.SetReportSink([&](std::vector<uint8_t> r) { a_report = std::move(r); });
  a.SampleNow();
  REQUIRE(!a_report.empty());

  cluster::RemoteReport from_a{"a:1", true, true, 40, a_report};
  cluster::RemoteReport from_c{"c:1", false, true, -1, {}};
  b.SetClusterSource([&] { return Facts(1, {"a:1", "b:1", "c:1"}, {from_a, from_c}); });
  const StatusSnapshot s = b.Snapshot();
  CHECK(s.state == "training");
  CHECK(s.leader == "a:1");
  REQUIRE(s.peers.size() == 3);  // hosts-file order
  CHECK(s.peers[0].figures.peer == "a:1");
  CHECK(s.peers[0].have_figures);
  CHECK(s.peers[0].figures.step == 5);
  CHECK(s.peers[0].figures.slots == 8);
  CHECK(s.peers[1].self);
  CHECK(s.peers[2].figures.state == "unreachable");
  REQUIRE(s.events.size() == 1);  // a's view change, merged
  CHECK(s.events[0].origin == "a:1");

  // JSON: the DESIGN keys.
  auto v = ParseJson(StatusJson(s));
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  for (const char* key : {"state", "epoch", "leader", "step", "peers", "events", "history"}) {
    CHECK_MESSAGE(v->Find(key) != nullptr, key);
  }
  const JsonValue& peer0 = v->Find("peers")->items()[0];
  CHECK(peer0.StringOr("peer", "") == "a:1");
  CHECK(peer0.NumberOr("step", -1) == 5);
  CHECK(peer0.NumberOr("tokens_per_s", -1) == 1000);
  CHECK(peer0.StringOr("state", "") == "training");
  CHECK(v->Find("peers")->items()[2].StringOr("state", "") == "unreachable");

  // Prometheus: labelled per peer, with HELP and TYPE.
  const std::string text = PrometheusText(s);
  CHECK(text.find("# TYPE ringtrain_step gauge\n") != std::string::npos);
  CHECK(text.find("ringtrain_step{peer=\"a:1\"} 5\n") != std::string::npos);
  CHECK(text.find("ringtrain_peer_up{peer=\"c:1\"} 0\n") != std::string::npos);
  CHECK(text.find("ringtrain_leader{peer=\"a:1\"} 1\n") != std::string::npos);
  CHECK(text.find("ringtrain_sent_bytes_total{peer=\"a:1\"} 12345\n") != std::string::npos);
  CHECK(text.find("nan") == std::string::npos);
  b.SetClusterSource(nullptr);
}

TEST_CASE("the leader appends events to --events -- a member does not") {
  rt::testing::TempDir tmp;
  BoardOptions o;
  o.self = "a:1";
  o.events_path = tmp / "a.jsonl";
  o.sample_interval = absl::Milliseconds(20);
  StatusBoard a(o);
  o.self = "b:1";
  o.events_path = tmp / "b.jsonl";
  StatusBoard b(o);
  REQUIRE(a.Start().ok());
  REQUIRE(b.Start().ok());
  a.SetClusterSource([] { return Facts(1, {"a:1", "b:1"}, {}); });
  b.SetClusterSource([] { return Facts(1, {"a:1", "b:1"}, {}); });
  a.OnDecision(Install(1, {"a:1", "b:1"}));
  a.OnCheckpoint(10, 1, "/ckpt", "");
  b.OnCheckpoint(10, 1, "/ckpt", "disk full");
  absl::SleepFor(absl::Milliseconds(200));
  a.Stop();
  b.Stop();
  const std::string written = rt::testing::ReadFile(tmp / "a.jsonl");
  CHECK(written.find("\"kind\":\"view_change\"") != std::string::npos);
  CHECK(written.find("\"kind\":\"checkpoint\"") != std::string::npos);
  CHECK(rt::testing::ReadFile(tmp / "b.jsonl").empty());
  BoardOptions bad;
  bad.events_path = tmp / "missing/dir/e.jsonl";
  StatusBoard c(bad);
  CHECK(!c.Start().ok());
}

TEST_CASE("the history keeps the whole run in bounded memory") {
  StepHistory h(64);
  for (int64_t s = 1; s <= 10000; ++s) {
    StepPoint p;
    p.step = s;
    p.loss = 1.0 / s;
    if (s % 1000 == 0) p.val_loss = 2.0 / s;
    h.Add(p);
  }
  CHECK(h.points().size() <= 64);
  CHECK(h.points().front().step <= 256);
  CHECK(h.points().back().step >= 10000 - h.stride());
  int evals = 0;
  for (const StepPoint& p : h.points()) evals += std::isfinite(p.val_loss);
  CHECK(evals == 10);
  // A redone step replaces what came after it.
  h.Add(StepPoint{9000, 0, 0, 0.5});
  CHECK(h.points().back().step <= 9000);
  CHECK(h.points().back().step > 9000 - h.stride());
}

}  // namespace rt::observe
