// Prometheus: a real Prometheus server (Debian's `prometheus`,
// started here on a loopback port with a scrape config written here) scrapes 3 local
// peers every second; its query API returns `ringtrain_step` for all 3 peers from
// each peer's endpoint, and the values grow. `promtool check metrics` reports nothing
// on a peer's /metrics. Needs /usr/bin/prometheus and promtool (tools/install-deps
// --test installs them).
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "observe_harness.h"

namespace {

using namespace rt::integration::fault;         // NOLINT: test-local harness
using namespace rt::integration::observe_test;  // NOLINT
using rt::integration::ProcessGroup;
using rt::integration::RunCommand;
using rt::integration::TempDir;
using rt::integration::TestBasePort;

// instance -> peer -> value of `query`'s vector result.
std::map<std::string, std::map<std::string, double>> Query(int port, const std::string& query) {
  std::map<std::string, std::map<std::string, double>> out;
  auto v = rt::observe::ParseJson(HttpBody(port, "/api/v1/query?query=" + query));
  if (!v.ok() || v->StringOr("status", "") != "success") return out;
  const rt::observe::JsonValue* data = v->Find("data");
  const rt::observe::JsonValue* result = data != nullptr ? data->Find("result") : nullptr;
  if (result == nullptr) return out;
  for (const auto& r : result->items()) {
    const rt::observe::JsonValue* metric = r.Find("metric");
    const rt::observe::JsonValue* value = r.Find("value");
    if (metric == nullptr || value == nullptr || value->items().size() != 2) continue;
    out[metric->StringOr("instance", "")][metric->StringOr("peer", "")] =
        std::strtod(value->items()[1].str().c_str(), nullptr);
  }
  return out;
}

}  // namespace

TEST_CASE("prometheus scrapes 3 peers: ringtrain_step of every peer from each, growing") {
  const bool installed =
      access("/usr/bin/prometheus", X_OK) == 0 && access("/usr/bin/promtool", X_OK) == 0;
  REQUIRE_MESSAGE(installed, "Debian's prometheus package is needed: tools/install-deps --test");
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  FaultCluster c(tmp / "run", 3, TinyTrainArgs(tmp / "data", kUntilStopped, 12), base);
  c.WriteHostsAll({0, 1, 2});
  std::vector<std::string> targets;
  for (int i = 0; i < 3; ++i) {
    c.Start(i, {"--http=" + std::to_string(base + 20 + i)});
    targets.push_back("'127.0.0.1:" + std::to_string(base + 20 + i) + "'");
  }
  const int prom_port = base + 30;
  rt::testing::WriteFile(tmp / "prometheus.yml",
                         "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                         "scrape_configs:\n  - job_name: ringtrain\n    static_configs:\n"
                         "      - targets: [" +
                             absl::StrJoin(targets, ", ") + "]\n");
  ProcessGroup prom(tmp.path());
  prom.Start({"/usr/bin/prometheus", "--config.file=" + tmp / "prometheus.yml",
              "--storage.tsdb.path=" + tmp / "tsdb",
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)});

  std::set<std::string> peers;
  for (int i = 0; i < 3; ++i) peers.insert(c.Endpoint(i));
  auto all_seen = [&](const std::map<std::string, std::map<std::string, double>>& r) {
    if (r.size() != 3) return false;
    for (const auto& [instance, by_peer] : r) {
      std::set<std::string> got;
      for (const auto& [peer, v] : by_peer) got.insert(peer);
      if (got != peers) return false;
    }
    return true;
  };
  std::map<std::string, std::map<std::string, double>> first;
  REQUIRE_MESSAGE(PollUntil(
                      [&] {
                        first = Query(prom_port, "ringtrain_step");
                        return all_seen(first);
                      },
                      90),
                  "prometheus never returned ringtrain_step of all 3 peers from each endpoint\n"
                      << c.Dump());
  std::map<std::string, std::map<std::string, double>> later;
  const bool grew = PollUntil(
      [&] {
        later = Query(prom_port, "ringtrain_step");
        if (!all_seen(later)) return false;
        for (const auto& [instance, by_peer] : later) {
          for (const auto& [peer, v] : by_peer) {
            if (!(v > first[instance][peer])) return false;
          }
        }
        return true;
      },
      60);
  CHECK_MESSAGE(grew, "ringtrain_step did not grow for every series");
  for (const auto& [instance, by_peer] : later) {
    for (const auto& [peer, v] : by_peer) {
      std::printf("observe figure: prometheus ringtrain_step{instance=%s,peer=%s}: %.0f -> %.0f\n",
                  instance.c_str(), peer.c_str(), first[instance][peer], v);
    }
  }
  // promtool's linter on what a peer serves: nothing to report.
  const std::string metrics = HttpBody(base + 20, "/metrics");
  REQUIRE(!metrics.empty());
  rt::testing::WriteFile(tmp / "metrics.txt", metrics);
  const rt::integration::RunResult lint =
      RunCommand({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + tmp / "metrics.txt"},
                 tmp.path(), 60);
  CHECK_MESSAGE(lint.exit_code == 0, lint.out << lint.err);
  CHECK_MESSAGE(lint.out.empty(), lint.out);
  CHECK_MESSAGE(lint.err.empty(), lint.err);
  prom.KillAll();
}
