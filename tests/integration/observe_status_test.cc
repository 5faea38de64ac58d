// A ring seen from anywhere: 3 peers with --http and --events.
// Every peer's /api/status lists all three training; `ringtrain status` answers (exit
// 0) with the table, or --json. A peer killed with kill -9 shows in every other
// peer's /api/status and in `ringtrain status` within --peer-timeout + 1 s, with the
// view-change event naming it and why; the leader's --events file holds one line
// per view change. A second kill leaves one peer without quorum: status exits 1; with
// every peer gone it exits 2. Meanwhile hostile HTTP clients (a 1 MB request line, a
// slow client, 1,000 connections, paths outside the site) are answered or dropped
// while training goes on.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>

#include <set>
#include <string>
#include <vector>

#include "observe_harness.h"

namespace {

using namespace rt::integration::fault;         // NOLINT: test-local harness
using namespace rt::integration::observe_test;  // NOLINT
using rt::integration::RunCommand;
using rt::integration::TempDir;
using rt::integration::TestBasePort;

constexpr double kPeerTimeout = 2.0;

// `ringtrain status --hosts FILE [extra]` (bounded).
rt::integration::RunResult Status(const std::string& hosts, const std::string& scratch,
                                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {RINGTRAIN_BINARY, "status", "--hosts", hosts, "--timeout", "3"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCommand(argv, scratch, 30);
}

// Resident memory of a process in kB (-1 if unknown).
long RssKb(pid_t pid) {
  const std::string s = rt::testing::ReadFile("/proc/" + std::to_string(pid) + "/status");
  const size_t at = s.find("VmRSS:");
  return at == std::string::npos ? -1 : std::strtol(s.c_str() + at + 6, nullptr, 10);
}

}  // namespace

TEST_CASE("status pages: every peer sees the ring -- a killed peer shows within the timeout") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", kUntilStopped, 12);
  args.push_back("--peer-timeout=" + std::to_string(kPeerTimeout));
  FaultCluster c(tmp / "run", 3, args, base);
  c.WriteHostsAll({0, 1, 2});
  auto http = [&](int i) { return base + 20 + i; };
  for (int i = 0; i < 3; ++i) {
    c.Start(i, {"--http=" + std::to_string(http(i)),
                "--events=" + tmp / ("events" + std::to_string(i) + ".jsonl")});
  }
  REQUIRE_MESSAGE(PollUntil(
                      [&] {
                        for (int i = 0; i < 3; ++i) {
                          if (TrainingPeers(ApiStatus(http(i))) != 3) return false;
                        }
                        return true;
                      },
                      90),
                  c.Dump());
  const rt::observe::JsonValue s0 = ApiStatus(http(1));
  CHECK(s0.StringOr("state", "") == "training");
  CHECK(s0.StringOr("leader", "") == c.Endpoint(0));
  CHECK(s0.NumberOr("epoch", 0) >= 1);
  for (int i = 0; i < 3; ++i) {
    const rt::observe::JsonValue* row = PeerRow(s0, c.Endpoint(i));
    REQUIRE(row != nullptr);
    CHECK(row->NumberOr("step", -1) >= 0);
    CHECK(row->Find("tokens_per_s") != nullptr);
    CHECK(row->NumberOr("rss_bytes", 0) > 0);
  }

  // `ringtrain status` from outside the ring: the table, then --json.
  const std::string hosts = c.HostsPath(0);
  rt::integration::RunResult table = Status(hosts, tmp.path());
  CHECK_MESSAGE(table.exit_code == 0, table.out << table.err);
  for (int i = 0; i < 3; ++i) CHECK(table.out.find(c.Endpoint(i)) != std::string::npos);
  CHECK(table.out.find("ring: training") != std::string::npos);
  rt::integration::RunResult json = Status(hosts, tmp.path(), {"--json"});
  CHECK(json.exit_code == 0);
  auto parsed = rt::observe::ParseJson(json.out);
  REQUIRE_MESSAGE(parsed.ok(), json.out);
  for (const char* key : {"state", "epoch", "leader", "step", "peers"}) {
    CHECK_MESSAGE(parsed->Find(key) != nullptr, key);
  }
  REQUIRE(parsed->Find("peers")->items().size() == 3);
  for (const auto& p : parsed->Find("peers")->items()) {
    for (const char* key : {"peer", "state", "step", "tokens_per_s"}) CHECK(p.Find(key) != nullptr);
  }

  // Hostile clients against peer 1 while the ring trains.
  {
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    if (lim.rlim_cur < 1200 && lim.rlim_max >= 1200) {
      lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
    c.Poll();
    const int64_t step_before = c.LastStep(1);
    const long rss_before = RssKb(c.Pid(1));
    const uint16_t port = static_cast<uint16_t>(http(1));
    const int huge = rt::observe::testing::ConnectLoopback(port);
    REQUIRE(huge >= 0);
    (void)rt::observe::testing::SendAll(huge, "GET /" + std::string(1 << 20, 'a'));
    const std::string huge_answer = rt::observe::testing::ReadUntilClosed(huge, 5000);
    ::close(huge);
    CHECK(huge_answer.rfind("HTTP/1.1 414 ", 0) == 0);
    const int slow = rt::observe::testing::ConnectLoopback(port);
    REQUIRE(rt::observe::testing::SendAll(slow, "GET /api/sta"));
    std::vector<int> many;
    for (int k = 0; k < 1000; ++k) {
      const int fd = rt::observe::testing::ConnectLoopback(port);
      if (fd >= 0) many.push_back(fd);
    }
    CHECK(many.size() >= 900);
    bool slow_closed = false;
    rt::observe::testing::ReadUntilClosed(slow, 10000, &slow_closed);
    CHECK(slow_closed);
    ::close(slow);
    for (int fd : many) ::close(fd);
    CHECK(rt::observe::testing::Get(port, "/../../etc/passwd").rfind("HTTP/1.1 404 ", 0) == 0);
    CHECK(!HttpBody(http(1), "/metrics").empty());
    REQUIRE(c.WaitUntil([&] { return c.LastStep(1) > step_before + 3; }, 30));
    const long rss_after = RssKb(c.Pid(1));
    std::printf("observe figure: peer RSS %ld kB before the hostile clients, %ld kB after\n",
                rss_before, rss_after);
    CHECK(rss_after < rss_before + 64 * 1024);
  }

  // kill -9 a member: within --peer-timeout + 1 s every survivor's page and `ringtrain
  // status` show it gone, with the event that says why.
  c.Poll();
  const double t_kill = c.Kill9(2);
  const std::string killed = c.Endpoint(2);
  auto shows_gone = [&](const rt::observe::JsonValue& s) {
    const rt::observe::JsonValue* row = PeerRow(s, killed);
    if (row == nullptr || row->StringOr("state", "") != "unreachable") return false;
    const rt::observe::JsonValue* events = s.Find("events");
    if (events == nullptr) return false;
    for (const auto& e : events->items()) {
      if (e.StringOr("kind", "") != "view_change") continue;
      for (const auto& l : e.Find("left")->items()) {
        if (l.str() == killed &&
            e.StringOr("message", "").find(killed + " (") != std::string::npos) {
          return true;
        }
      }
    }
    return false;
  };
  double seen_at[2] = {-1, -1};
  PollUntil(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (seen_at[i] < 0 && shows_gone(ApiStatus(http(i)))) seen_at[i] = NowS() - t_kill;
        }
        return seen_at[0] >= 0 && seen_at[1] >= 0;
      },
      20);
  for (int i = 0; i < 2; ++i) {
    std::printf(
        "observe figure: peer %d's /api/status shows the killed peer and why after %.2f s\n", i,
        seen_at[i]);
    CHECK_MESSAGE(seen_at[i] >= 0, "peer " << i << " never showed it\n" << c.Dump());
    CHECK(seen_at[i] <= kPeerTimeout + 1.0);
  }
  rt::integration::RunResult after = Status(hosts, tmp.path(), {"--json"});
  CHECK(after.exit_code == 0);  // the two survivors keep a quorum and train
  auto after_json = rt::observe::ParseJson(after.out);
  REQUIRE(after_json.ok());
  CHECK(shows_gone(*after_json));
  std::printf("observe figure: ringtrain status answered %.2f s after the kill\n", NowS() - t_kill);
  CHECK(NowS() - t_kill <= kPeerTimeout + 1.0 + 3.0);  // + the time status itself takes

  // Without quorum: exit 1 and the reason; nobody left: exit 2.
  c.Kill9(1);
  REQUIRE(PollUntil([&] { return ApiStatus(http(0)).StringOr("state", "") == "paused"; }, 20));
  rt::integration::RunResult paused = Status(hosts, tmp.path());
  CHECK_MESSAGE(paused.exit_code == 1, paused.out << paused.err);
  CHECK(paused.out.find("no quorum") != std::string::npos);

  // The leader's events file: one line per view change (each epoch once). It is
  // written by the leader's sampler thread, a moment after the events.
  const auto view_change_lines = [&] {
    int n = 0;
    for (const std::string& l :
         rt::integration::NonEmptyLines(rt::testing::ReadFile(tmp / "events0.jsonl"))) {
      n += l.find("\"kind\":\"view_change\"") != std::string::npos;
    }
    return n;
  };
  PollUntil([&] { return view_change_lines() >= 2; }, 5);
  const std::vector<std::string> lines =
      rt::integration::NonEmptyLines(rt::testing::ReadFile(tmp / "events0.jsonl"));
  std::set<double> epochs;
  int view_changes = 0;
  bool pause_logged = false;
  for (const std::string& line : lines) {
    auto e = rt::observe::ParseJson(line);
    REQUIRE_MESSAGE(e.ok(), line);
    if (e->StringOr("kind", "") == "pause") pause_logged = true;
    if (e->StringOr("kind", "") != "view_change") continue;
    ++view_changes;
    epochs.insert(e->NumberOr("epoch", -1));
  }
  CHECK_MESSAGE(view_changes >= 2, rt::testing::ReadFile(tmp / "events0.jsonl") << c.Dump(60));
  CHECK(epochs.size() == static_cast<size_t>(view_changes));
  CHECK(pause_logged);
  c.Poll();
  std::set<double> trained_epochs;
  for (const Metric& m : c.Metrics(0)) trained_epochs.insert(static_cast<double>(m.epoch));
  for (double e : trained_epochs) CHECK_MESSAGE(epochs.count(e) == 1, "epoch " << e);
  CHECK(rt::testing::ReadFile(tmp / "events1.jsonl").find("view_change") == std::string::npos);

  c.KillAll();
  rt::integration::RunResult gone = Status(hosts, tmp.path());
  CHECK(gone.exit_code == 2);
  CHECK(gone.err.find("no peer of the hosts file answered") != std::string::npos);
}

TEST_CASE("status: a wrong secret is refused, a port in use is a clear error") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort() + 5;
  // --http on a port another peer serves: exit 2 naming it, before any training.
  FaultCluster c(tmp / "run", 1, TinyTrainArgs(tmp / "data", kUntilStopped, 4), base);
  c.WriteHostsAll({0});
  c.Start(0, {"--http=" + std::to_string(base + 30)});
  REQUIRE(c.WaitUntil([&] { return c.LastStep(0) >= 2; }, 60));
  const rt::integration::RunResult clash = rt::integration::RunRingtrain(
      [&] {
        std::vector<std::string> a = {"train"};
        for (const auto& x : TinyTrainArgs(tmp / "data", 5, 4)) a.push_back(x);
        a.push_back("--http=" + std::to_string(base + 30));
        return a;
      }(),
      tmp.path(), 60);
  CHECK(clash.exit_code == 2);
  CHECK(clash.err.find("127.0.0.1:" + std::to_string(base + 30)) != std::string::npos);
  CHECK(clash.err.find("in use") != std::string::npos);
  // A status client with another secret gets no answer: exit 2 saying so.
  rt::testing::WriteFile(tmp / "wrong-secret", "not-the-secret\n");
  const rt::integration::RunResult wrong =
      RunCommand({RINGTRAIN_BINARY, "status", "--hosts", c.HostsPath(0), "--secret-file",
                  tmp / "wrong-secret", "--timeout", "3"},
                 tmp.path(), 30);
  CHECK(wrong.exit_code == 2);
  CHECK(wrong.err.find("secret") != std::string::npos);
  const rt::integration::RunResult ok = RunCommand(
      {RINGTRAIN_BINARY, "status", "--hosts", c.HostsPath(0), "--timeout", "3"}, tmp.path(), 30);
  CHECK_MESSAGE(ok.exit_code == 0, ok.out << ok.err);
  const rt::integration::RunResult usage = RunCommand({RINGTRAIN_BINARY, "status"}, tmp.path(), 30);
  CHECK(usage.exit_code == 2);
  CHECK(usage.err.find("--hosts") != std::string::npos);
}
