// The dashboard: headless Chromium (Debian's `chromium`) loads `/`
// of a running 2-peer ring; the drawn DOM holds both peers and a loss curve of at
// least 3 points, which has more on the next load; a screenshot PNG is written
// (RT_DASHBOARD_PNG=path keeps it, e.g. for the README). Needs /usr/bin/chromium
// (tools/install-deps --test).
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "observe_harness.h"

namespace {

using namespace rt::integration::fault;         // NOLINT: test-local harness
using namespace rt::integration::observe_test;  // NOLINT
using rt::integration::RunCommand;
using rt::integration::TempDir;
using rt::integration::TestBasePort;

// Chromium as this machine runs it headless (no sandbox as root, no calls out).
std::vector<std::string> Chromium(const std::string& profile) {
  return {"/usr/bin/chromium",
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--user-data-dir=" + profile,
          "--virtual-time-budget=8000"};
}

// The loss chart's attribute `name` (a number), -1 if missing: Chromium writes the
// attributes in the order the page set them.
int LossChartNumber(const std::string& dom, const std::string& name) {
  std::smatch m;
  const std::regex re(R"re(<svg[^>]*id="loss-chart"[^>]*)re" + name + R"re(="(\d+)")re");
  if (std::regex_search(dom, m, re)) return std::stoi(m[1]);
  return -1;
}
int LossPoints(const std::string& dom) { return LossChartNumber(dom, "data-points"); }
int LossLastStep(const std::string& dom) { return LossChartNumber(dom, "data-last"); }

}  // namespace

TEST_CASE("dashboard: Chromium draws both peers and a growing loss curve") {
  REQUIRE_MESSAGE(access("/usr/bin/chromium", X_OK) == 0,
                  "Debian's chromium package is needed: tools/install-deps --test");
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", kUntilStopped, 8);
  args.push_back("--eval-every=5");
  FaultCluster c(tmp / "run", 2, args, base);
  c.WriteHostsAll({0, 1});
  for (int i = 0; i < 2; ++i) c.Start(i, {"--http=" + std::to_string(base + 20 + i)});
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 5 && c.LastStep(1) >= 5; }, 90),
                  c.Dump());
  const std::string url = "http://127.0.0.1:" + std::to_string(base + 20) + "/";
  auto load = [&](const std::string& profile) {
    std::vector<std::string> argv = Chromium(tmp / profile);
    argv.push_back("--dump-dom");
    argv.push_back(url);
    return RunCommand(argv, tmp.path(), 120);
  };
  const rt::integration::RunResult first = load("profile1");
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);
  for (int i = 0; i < 2; ++i) {
    CHECK_MESSAGE(first.out.find("data-peer=\"" + c.Endpoint(i) + "\"") != std::string::npos,
                  first.out.substr(0, 2000));
  }
  CHECK(first.out.find("data-state=\"training\"") != std::string::npos);
  const int n1 = LossPoints(first.out);
  CHECK_MESSAGE(n1 >= 3, "loss points: " << n1);
  const int64_t at = c.LastStep(0);
  REQUIRE(c.WaitUntil([&] { return c.LastStep(0) >= at + 3; }, 60));
  const rt::integration::RunResult second = load("profile2");
  REQUIRE(second.exit_code == 0);
  const int n2 = LossPoints(second.out);
  const int last1 = LossLastStep(first.out), last2 = LossLastStep(second.out);
  std::printf(
      "observe figure: dashboard loss curve points %d (to step %d), then %d (to step %d) on "
      "the next load\n",
      n1, last1, n2, last2);
  // The curve grows: it reaches a later step. Its point count grows too, unless the
  // peer's history (2,048 points, observe/step_history.h) filled up between the loads
  // and kept every other step from then on: a slow first Chromium start on this fast
  // tiny run got there once, 1,780 points, then 1,338.
  CHECK(last1 >= 5);
  CHECK(last2 > last1);
  // One point per step at most: below step 2,048 nothing can have been thinned.
  if (last2 < 2048) CHECK(n2 > n1);

  const char* keep = std::getenv("RT_DASHBOARD_PNG");
  const std::string png = keep != nullptr ? std::string(keep) : tmp / "dashboard.png";
  std::vector<std::string> shot = Chromium(tmp / "profile3");
  shot.push_back("--hide-scrollbars");
  shot.push_back("--window-size=1280,1500");
  shot.push_back("--screenshot=" + png);
  shot.push_back(url);
  const rt::integration::RunResult s = RunCommand(shot, tmp.path(), 120);
  REQUIRE_MESSAGE(s.exit_code == 0, s.err);
  const std::string bytes = rt::testing::ReadFile(png);
  REQUIRE(bytes.size() > 1000);
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
}
