// The delayed-links kill test: tools/soak-delayed with the acceptance's links and times.
// 4 netns peers train for 3 minutes on 100 Mbit/s links with 50 ms one-way delay, 5 ms
// jitter and 0.5% loss: no peer may be removed meanwhile (delay, jitter and loss alone
// must not look like a failure). Then kill -9 of one peer: the survivors must change to
// a view without it within 10 s (the detection time docs/delayed-links.md states for
// these links: the failure timeout, at most 10 s, plus a view change); restarted, it
// must train in the full view again; at SIGTERM all must stop at one step with one
// param_hash. Every parameter is passed explicitly, so a change of the tool's defaults
// cannot weaken the test.
//
// About 5 minutes of wall time (first view ~45 s with the link probe, 3 minutes of
// training, a rejoin of about a minute, 20 s more). It runs alone like every integration
// test; the tool is given 560 s, inside ctest's 600 s TIMEOUT of integration tests, so a
// hang is reported by this test with the tool's output rather than by ctest's kill.
// Needs root and `ip netns` (CI runs as root); without them it is reported skipped.
#include <unistd.h>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "netns_cluster.h"
#include "process_group.h"
#include "skip.h"

namespace {

using rt::integration::kNetnsClusterTool;
using rt::integration::NetnsUnavailable;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

// The number after `"key": ` in a JSON line as Python's json.dumps writes it (a space
// after the colon, unlike ringtrain's own lines: process_group.h's JsonNumber); NaN if
// absent or not a number (null).
double PyJsonNumber(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\": ";
  const size_t at = json.find(k);
  if (at == std::string::npos) return std::nan("");
  char* end = nullptr;
  const char* begin = json.c_str() + at + k.size();
  const double v = std::strtod(begin, &end);
  return end == begin ? std::nan("") : v;
}

TEST_CASE(
    "soak delayed: 4 netns peers on 50 ms, 5 ms jitter, 0.5% loss links -- 3 min with no "
    "removal, kill -9 out of the view within 10 s, back after a restart, one hash") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("soak delayed: " + why + " (needs root and ip netns)");
    return;
  }
  // A prefix of this process (like NetnsCluster's): two runs at once, or the leftovers
  // of a killed run, never share a namespace name.
  const std::string prefix = "sd" + std::to_string(getpid() % 1000);
  const std::string work = tmp.path() + "/soak-delayed";
  // The tool removes its namespaces itself, also on SIGTERM; this removes them if it was
  // killed outright (a timeout), before and after the run.
  const std::vector<std::string> down_env = {"RT_NETNS_PREFIX=" + prefix,
                                             "RT_NETNS_DIR=" + work + "/netns"};
  struct Down {
    const TempDir& tmp;
    const std::vector<std::string>& env;
    ~Down() { RunCommand({"/bin/bash", kNetnsClusterTool, "down"}, tmp.path(), 60, env); }
  } down{tmp, down_env};
  RunCommand({"/bin/bash", kNetnsClusterTool, "down"}, tmp.path(), 60, down_env);

  const RunResult r = RunCommand({"/usr/bin/python3", RINGTRAIN_SOURCE_DIR "/tools/soak-delayed",
                                  "--peers",          "4",
                                  "--minutes",        "3",
                                  "--rate",           "100mbit",
                                  "--delay",          "50ms",
                                  "--jitter",         "5ms",
                                  "--loss",           "0.5%",
                                  "--fault",          "kill",
                                  "--max-detect-s",   "10",
                                  "--peer-timeout",   "3",
                                  "--seed",           "1",
                                  "--prefix",         prefix,
                                  "--work",           work},
                                 tmp.path(), 560,
                                 {std::string("RINGTRAIN=") + RINGTRAIN_BINARY,
                                  std::string("NETEM_RELAY=") + NETEM_RELAY_BINARY});
  INFO(r.out.substr(r.out.size() > 6000 ? r.out.size() - 6000 : 0));
  INFO(r.err);
  // The work directory goes with the TempDir: on a failure, the end of every peer's logs
  // (a crash at the stop shows only there).
  std::string peer_logs;
  if (r.exit_code != 0) {
    std::error_code ec;
    for (const auto& peer : std::filesystem::directory_iterator(work, ec)) {
      for (const auto& f : std::filesystem::directory_iterator(peer.path(), ec)) {
        if (f.path().extension() != ".log") continue;
        const std::string text = rt::testing::ReadFile(f.path().string());
        peer_logs += "--- " + f.path().string() + " (end):\n" +
                     text.substr(text.size() > 1500 ? text.size() - 1500 : 0) + "\n";
      }
    }
  }
  INFO(peer_logs);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  // The summary's JSON line, its checks one by one (so a failure names the one missed).
  const size_t at = r.out.rfind("{\"bench\": \"soak-delayed\"");
  REQUIRE(at != std::string::npos);
  const std::string summary = r.out.substr(at, r.out.find('\n', at) - at);
  INFO(summary);
  // The figures (detection and rejoin seconds), seen with `ctest -V`.
  std::printf("soak-delayed figures: %s\n", summary.c_str());
  CHECK(summary.find("\"ok\": true") != std::string::npos);
  CHECK(summary.find("\"hang\": false") != std::string::npos);
  CHECK(summary.find("\"fault\": \"kill\"") != std::string::npos);
  CHECK(summary.find("\"peers\": 4,") != std::string::npos);
  CHECK(summary.find("\"links\": \"--rate 100mbit --delay 50ms --jitter 5ms --loss 0.5%\"") !=
        std::string::npos);
  // 1. Three minutes of training (some steps taken) and no peer removed.
  CHECK(PyJsonNumber(summary, "train_minutes") >= 3.0);
  CHECK(PyJsonNumber(summary, "train_steps") > 0);
  CHECK(summary.find("\"removed_while_training\": []") != std::string::npos);
  // 2. The killed peer out of the survivors' view within 10 s of the signal.
  const double removed_s = PyJsonNumber(summary, "removed_s");
  CHECK(removed_s >= 0);
  CHECK(removed_s <= 10.0);
  // 3. Back: every peer trains in the full view after the restart.
  CHECK(PyJsonNumber(summary, "rejoin_s") >= 0);
  // 4. One hash: the tool's "ok" includes every peer exiting 0 at one step with one
  // param_hash; that step was reported (-1 if not) and lies past the training phase.
  CHECK(PyJsonNumber(summary, "final_step") > PyJsonNumber(summary, "train_steps"));
}

}  // namespace
