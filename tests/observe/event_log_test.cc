// The event ring buffer (stamping, merging, bounds) and the --events file (each event
// once, also across leaders sharing the file).
#include "observe/event_log.h"

#include <doctest/doctest.h>

#include "observe/json.h"
#include "temp_dir.h"

namespace rt::observe {
namespace {

ClusterEvent Event(const std::string& kind, const std::string& message) {
  ClusterEvent e;
  e.kind = kind;
  e.message = message;
  return e;
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::string text = rt::testing::ReadFile(path);
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("events are stamped, merged once, kept in time order and bounded") {
  EventLog a("a:1", 4), b("b:1", 4);
  const ClusterEvent e1 = a.Record(Event("pause", "paused: no quorum"));
  CHECK(e1.origin == "a:1");
  CHECK(e1.seq == 1);
  CHECK(e1.unix_ms > 0);
  b.Merge(a.OwnRecent(16));
  b.Merge(a.OwnRecent(16));  // idempotent
  REQUIRE(b.All().size() == 1);
  CHECK(b.All()[0].message == "paused: no quorum");
  CHECK(b.OwnRecent(16).empty());
  for (int i = 0; i < 10; ++i) b.Record(Event("warning", std::to_string(i)));
  CHECK(b.All().size() == 4);  // bounded
  CHECK(b.total() == 11);
  CHECK(b.All().back().message == "9");
  // A restarted origin counts from 1 again, later: its events are new.
  EventLog a2("a:1", 4);
  ClusterEvent restarted = Event("start", "again");
  restarted.unix_ms = e1.unix_ms + 5000;
  a2.Record(restarted);
  EventLog c("c:1", 8);
  c.Merge(a.OwnRecent(16));
  c.Merge(a2.OwnRecent(16));
  CHECK(c.All().size() == 2);
}

TEST_CASE("EventJson is one valid JSON object with the view of a view change") {
  ClusterEvent e = Event("view_change", "view epoch 3: \"x\"");
  e.origin = "10.0.0.1:29500";
  e.seq = 7;
  e.unix_ms = 1767225600123;
  e.epoch = 3;
  e.leader = "10.0.0.1:29500";
  e.members = {"10.0.0.1:29500", "10.0.0.2:29500"};
  e.left = {"10.0.0.3:29500"};
  auto v = ParseJson(EventJson(e));
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  CHECK(v->StringOr("time", "") == "2026-01-01T00:00:00.123Z");
  CHECK(v->StringOr("kind", "") == "view_change");
  CHECK(v->NumberOr("epoch", 0) == 3);
  CHECK(v->Find("left")->items()[0].str() == "10.0.0.3:29500");
  CHECK(v->StringOr("message", "") == "view epoch 3: \"x\"");
}

TEST_CASE("the events file gets each event once, also from a second leader") {
  rt::testing::TempDir tmp;
  const std::string path = tmp / "events.jsonl";
  EventLog log("a:1");
  log.Record(Event("view_change", "one"));
  log.Record(Event("pause", "two"));
  {
    auto f = EventsFile::Open(path);
    REQUIRE(f.ok());
    REQUIRE(f->Append(log.All()).ok());
    REQUIRE(f->Append(log.All()).ok());
  }
  CHECK(Lines(path).size() == 2);
  // Another leader sharing the file: what it holds is not written again.
  EventLog other("b:1");
  other.Merge(log.OwnRecent(16));
  other.Record(Event("view_change", "three"));
  auto g = EventsFile::Open(path);
  REQUIRE(g.ok());
  REQUIRE(g->Append(other.All()).ok());
  const std::vector<std::string> lines = Lines(path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[2].find("\"three\"") != std::string::npos);
  CHECK(!EventsFile::Open(tmp / "no/such/dir/e.jsonl").ok());
}

}  // namespace rt::observe
