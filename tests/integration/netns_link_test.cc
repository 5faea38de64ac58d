// The link test: 4 peers in network namespaces
// (tools/netns-cluster), every link a veth pair shaped with tc tbf to 1 Gbit/s;
// `bench allreduce` of 32M floats must reach busbw >= 95% of the shaped rate
// (0.95 * 0.125 GB/s) in its best of 5 iterations, and >= 80% on average. Needs root and `ip netns`
// (CI runs as root); without them it says so and returns without checking. The cluster gets a
// per-run prefix and is always torn down (destructor), also when a check fails. Bounded: ~1-2 min.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "netns_cluster.h"
#include "process_group.h"
#include "skip.h"

namespace {

using rt::integration::JsonNumber;
using rt::integration::LastLineWithPrefix;
using rt::integration::ProcessGroup;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

using rt::integration::NetnsCluster;
using rt::integration::NetnsUnavailable;

}  // namespace

TEST_CASE("netns link test: 4 peers, tbf 1 Gbit/s veth, 32M floats, busbw >= 95% of the rate") {
  TempDir tmp;
  const std::string why = NetnsUnavailable(tmp);
  if (!why.empty()) {
    rt::testing::ReportSkip("netns link test: " + why + " (needs root and ip netns)");
    return;
  }
  // Jumbo frames (MTU 9000): tbf counts Ethernet frames, and with MTU 1500 TCP/IP
  // headers alone cost 4.4% of the link (1448 payload bytes per 1514-byte frame),
  // which leaves no room for the 95% target; at MTU 9000 they cost 0.7%.
  NetnsCluster cluster(tmp, "lt", {"4", "--rate", "1gbit", "--mtu", "9000"});
  INFO("netns-cluster up:\n", cluster.up_result().out, cluster.up_result().err);
  REQUIRE(cluster.up_result().exit_code == 0);

  std::vector<std::string> env = cluster.Env();
  env.push_back("OMP_NUM_THREADS=1");
  env.push_back("RINGTRAIN_SECRET=netns-link-test-secret");
  ProcessGroup group(tmp.path());
  for (int i = 0; i < 4; ++i) {
    group.Start(cluster.Exec(i, {RINGTRAIN_BINARY, "bench", "allreduce", "--hosts", cluster.hosts(),
                                 "--rank", std::to_string(i), "--size=32M", "--iters=5",
                                 "--warmup-iters=1", "--wait=30"}),
                env);
  }
  const std::vector<RunResult> results = group.WaitAll(300);
  const double target_GBps = 0.95 * 1e9 / 8 / 1e9;  // 95% of 1 Gbit/s in GB/s
  for (int i = 0; i < 4; ++i) {
    const RunResult& r = results[i];
    INFO("peer ", i, " stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE_FALSE(r.timed_out);
    REQUIRE(r.exit_code == 0);
    const std::string json = LastLineWithPrefix(r.out, "{");
    REQUIRE(!json.empty());
    CHECK(JsonNumber(json, "peers") == 4);
    CHECK(JsonNumber(json, "bytes") == 32e6 * 4);
    // The best iteration must reach the target: on a shared 2-core machine the
    // scheduler can starve one of the 4 peers during some iterations (that is CPU,
    // not the link); the mean must still be close.
    const double busbw = JsonNumber(json, "busbw_GBps");
    const double best = 32e6 * 4 / JsonNumber(json, "seconds_min") / 1e9 * 2.0 * 3 / 4;
    MESSAGE("peer " << i << ": busbw mean " << busbw << " GB/s, best iteration " << best
                    << " GB/s (target >= " << target_GBps << ")");
    CHECK(best >= target_GBps);
    CHECK(busbw >= 0.8 * 0.125);
    CHECK(best <= 0.125 * 1.05);  // the shaping works: no more than the link carries
  }
}
