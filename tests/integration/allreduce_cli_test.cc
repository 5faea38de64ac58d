// `ringtrain bench allreduce` on loopback rings started by tools/local-ring: 2 and 3
// peers, several small sizes (including 1 element and a prime), fp32, bf16 and top-k
// codecs. The benchmark verifies its own results (exact integer sums, or top-k
// conservation and identical bytes) and exits non-zero if they are wrong; the test
// checks exit codes, every peer's final JSON line and the local-ring contract
// (rank-prefixed lines, stop-all when a peer fails).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "process_group.h"

namespace {

using rt::integration::JsonNumber;
using rt::integration::JsonString;
using rt::integration::LastLineWithPrefix;
using rt::integration::LocalRingArgv;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

// tools/local-ring N -- bench allreduce <args>, bounded by `timeout_s`.
RunResult LocalRingBench(const TempDir& tmp, int peers, int base_port,
                         const std::vector<std::string>& bench_args, int timeout_s = 90) {
  std::vector<std::string> argv = LocalRingArgv(peers, base_port, timeout_s);
  argv.insert(argv.end(), {"bench", "allreduce", "--wait=30"});
  argv.insert(argv.end(), bench_args.begin(), bench_args.end());
  return RunCommand(argv, tmp.path(), timeout_s,
                    {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
}

// Checks every peer's last (JSON) line: fields present and consistent.
void CheckPeersJson(const RunResult& r, int peers, double size, const std::string& codec) {
  for (int rank = 0; rank < peers; ++rank) {
    const std::string json = LastLineWithPrefix(r.out, "[r" + std::to_string(rank) + "] {");
    INFO("rank ", rank, " stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE(!json.empty());
    CHECK(JsonNumber(json, "peers") == peers);
    CHECK(JsonNumber(json, "rank") == rank);
    CHECK(JsonNumber(json, "size") == size);
    CHECK(JsonNumber(json, "bytes") == size * 4);
    CHECK(JsonString(json, "codec") == codec);
    CHECK(json.find("\"verified\":true") != std::string::npos);
    const double seconds = JsonNumber(json, "seconds");
    const double algbw = JsonNumber(json, "algbw_GBps"), busbw = JsonNumber(json, "busbw_GBps");
    CHECK(seconds > 0);
    CHECK(algbw > 0);
    // busbw = algbw * 2(N-1)/N (printed with 4 decimals).
    CHECK(std::fabs(busbw - algbw * 2.0 * (peers - 1) / peers) <= 2e-4 + 1e-3 * busbw);
    const double wire = JsonNumber(json, "wire_bytes");
    if (codec == "none") {
      // Dense fp32 ring: each peer sends 2(N-1)/N of the buffer (segments are
      // uneven when N does not divide the size).
      const double expected = 2.0 * (peers - 1) / peers * size * 4;
      CHECK(wire >= expected - 8.0 * peers);
      CHECK(wire <= expected + 8.0 * peers);
    } else if (codec == "bf16") {
      const double expected = 2.0 * (peers - 1) / peers * size * 2;
      CHECK(wire >= expected - 4.0 * peers);
      CHECK(wire <= expected + 4.0 * peers);
    } else {
      CHECK(wire > 0);
      CHECK(wire < 2.0 * (peers - 1) / peers * size * 4);  // sparse beats dense here
    }
  }
}

}  // namespace

TEST_CASE("bench allreduce: 2 and 3 loopback peers, fp32, exact results and JSON") {
  TempDir tmp;
  const int base = rt::integration::TestBasePort();
  for (int peers : {2, 3}) {
    INFO("peers ", peers);
    RunResult r = LocalRingBench(tmp, peers, base + peers * 5,
                                 {"--size=1,1000,100003", "--iters=3", "--warmup-iters=1"});
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE_FALSE(r.timed_out);
    REQUIRE(r.exit_code == 0);
    CheckPeersJson(r, peers, 100003, "none");
    // Every size appears in the human table of every peer; results list all sizes.
    const std::string json = LastLineWithPrefix(r.out, "[r0] {");
    CHECK(json.find("{\"size\":1,") != std::string::npos);
    CHECK(json.find("{\"size\":1000,") != std::string::npos);
    CHECK(r.out.find("[r" + std::to_string(peers - 1) + "] bench allreduce:") != std::string::npos);
  }
}

TEST_CASE("bench allreduce: bf16 and top-k codecs on 3 loopback peers") {
  TempDir tmp;
  const int base = rt::integration::TestBasePort() + 20;
  {
    RunResult r = LocalRingBench(tmp, 3, base, {"--size=50021", "--iters=2", "--compress=bf16"});
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE(r.exit_code == 0);
    CheckPeersJson(r, 3, 50021, "bf16");
  }
  {
    RunResult r =
        LocalRingBench(tmp, 3, base + 5, {"--size=200000", "--iters=3", "--compress=topk:0.01"});
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE(r.exit_code == 0);
    CheckPeersJson(r, 3, 200000, "topk:0.01");
    CHECK(JsonString(LastLineWithPrefix(r.out, "[r0] {"), "codec_used") == "topk:0.01");
  }
}

TEST_CASE("bench allreduce: gradient-like values, every codec verified on 3 loopback peers") {
  TempDir tmp;
  const int base = rt::integration::TestBasePort() + 35;
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"none", "every element within fp32 rounding of the exact sum"},
      {"bf16", "sum conserved with residuals, identical bytes"},
      {"topk:0.01", "sum conserved with residuals, identical bytes"}};
  int port = base;
  for (const auto& [codec, check] : runs) {
    CAPTURE(codec);
    RunResult r = LocalRingBench(
        tmp, 3, port, {"--size=200000", "--iters=3", "--values=gradient", "--compress=" + codec});
    port += 5;
    INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
    REQUIRE(r.exit_code == 0);
    CheckPeersJson(r, 3, 200000, codec);
    CHECK(r.out.find("[r2]   result check: OK (" + check + ")") != std::string::npos);
  }
  // A bad --values is refused before the ring forms, naming it.
  RunResult r = LocalRingBench(tmp, 1, port, {"--values=floats"}, 40);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--values must be integer or gradient, got 'floats'") != std::string::npos);
}

TEST_CASE("bench allreduce: bad input fails fast with a clear message") {
  TempDir tmp;
  const int base = rt::integration::TestBasePort() + 30;
  {
    RunResult r = LocalRingBench(tmp, 2, base, {"--size=12x"}, 40);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--size '12x'") != std::string::npos);
  }
  {
    RunResult r = LocalRingBench(tmp, 2, base, {"--compress=zip"}, 40);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("zip") != std::string::npos);
  }
  {
    RunResult r = LocalRingBench(tmp, 2, base, {"--iters=0"}, 40);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--iters") != std::string::npos);
  }
  {
    // Without --hosts (run directly): refused before any network activity.
    RunResult r =
        rt::integration::RunRingtrain({"bench", "allreduce", "--size=10"}, tmp.path(), 30);
    CHECK(r.exit_code != 0);
    CHECK(r.err.find("--hosts") != std::string::npos);
  }
}

TEST_CASE("bench allreduce: a peer that never comes gives a clear error after --wait") {
  TempDir tmp;
  const int base = rt::integration::TestBasePort() + 35;
  const std::string hosts = tmp / "hosts";
  {
    std::ofstream f(hosts);
    f << "127.0.0.1:" << base << "\n127.0.0.1:" << base + 1 << "\n";
  }
  RunResult r = rt::integration::RunRingtrain(
      {"bench", "allreduce", "--hosts=" + hosts, "--rank=0", "--wait=2", "--size=10"}, tmp.path(),
      60);
  INFO("stderr:\n", r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("bench allreduce:") != std::string::npos);
}
