// `ringtrain train --compress auto` on loopback rings: 3 peers probe their
// links, calibrate the codecs, and log the same ring order and the same codec plan
// (DescribePlan lines) on every peer; replicas stay bit-identical (param_hash of
// every step, compared over the ring every step). The comm flags are validated
// before any peer is waited for.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::JsonField;
using rt::integration::LocalRingArgv;
using rt::integration::NonEmptyLines;
using rt::integration::ReadFile;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;

// Synthetic data: a repeating pattern with noise, vocab 50, 3 source bytes per token.
void WriteData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 800;
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

std::vector<std::string> TrainFlags(const TempDir& tmp) {
  return {"train",       "--data",           tmp / "data",     "--layers=2",
          "--heads=2",   "--dim=32",         "--seq-len=16",   "--batch=4",
          "--threads=1", "--warmup=0",       "--lr=3e-3",      "--min-lr=3e-3",
          "--steps=6",   "--precision=fp32", "--eval-every=0", "--bucket-mb=0.01"};
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The messages of the log lines ("[time rN I] message") that start with `prefix`.
std::vector<std::string> LogMessages(const std::string& log, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& line : NonEmptyLines(log)) {
    const size_t at = line.find(" I] ");
    if (at == std::string::npos) continue;
    const std::string message = line.substr(at + 4);
    if (message.rfind(prefix, 0) == 0) out.push_back(message);
  }
  return out;
}

}  // namespace

TEST_CASE("comm: train --compress auto on 3 loopback peers -- same plan logged, bit-identical") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int peers = 3, timeout_s = 180;
  std::vector<std::string> argv =
      LocalRingArgv(peers, rt::integration::TestBasePort() + 27, timeout_s);
  argv.insert(argv.begin() + 3, {"--keep-logs", tmp / "logs"});  // after N
  for (const std::string& a : TrainFlags(tmp)) argv.push_back(a);
  for (const char* a : {"--compress=auto", "--probe-every=3", "--check-every=1", "--wait=30"}) {
    argv.push_back(a);
  }
  argv.push_back("--metrics=" + tmp / "m.jsonl");
  const RunResult r =
      RunCommand(argv, tmp.path(), timeout_s,
                 {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
  INFO("stdout:\n", r.out, "\nstderr:\n", r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);

  std::vector<std::vector<std::string>> plan(peers), order(peers), metrics(peers);
  for (int p = 0; p < peers; ++p) {
    const std::string log = ReadFile(tmp / ("logs/r" + std::to_string(p) + ".err"));
    for (const std::string& m : LogMessages(log, "step ")) {
      if (Contains(m, ": auto codec")) plan[p].push_back(m);
    }
    order[p] = LogMessages(log, "ring order ");
    metrics[p] = NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(p) + ".jsonl")));
    INFO("peer ", p);
    CHECK(LogMessages(log, "links from ").size() >= static_cast<size_t>(2 * peers));  // 2 probes
    CHECK(!LogMessages(log, "codec speeds (slowest peer)").empty());
  }
  // The plan is logged at the first step and whenever it changes: the same lines on
  // every peer (same inputs); the first plan is made without a measurement.
  REQUIRE(!plan[0].empty());
  CHECK(Contains(plan[0].front(), "step 1: auto codec: "));
  bool summary = false;
  for (const std::string& line : plan[0])
    summary = summary || Contains(line, "auto codec plan: 3 peers");
  CHECK(summary);
  for (int p = 1; p < peers; ++p) {
    CHECK(plan[p] == plan[0]);
    CHECK(order[p] == order[0]);  // ring order and each link's measured speed
  }
  // Replicas: the same loss and param_hash at every step on every peer.
  for (int p = 0; p < peers; ++p) REQUIRE(metrics[p].size() == 6);
  for (int s = 0; s < 6; ++s) {
    for (int p = 1; p < peers; ++p) {
      INFO("step ", s + 1, " peer ", p);
      CHECK(JsonField(metrics[p][s], "param_hash") == JsonField(metrics[0][s], "param_hash"));
      CHECK(JsonField(metrics[p][s], "loss") == JsonField(metrics[0][s], "loss"));
    }
  }
}

TEST_CASE("comm: bad --probe-every / --comm-budget are refused before waiting for peers") {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::string hosts = tmp / "hosts";
  {
    std::ofstream f(hosts);
    const int base = rt::integration::TestBasePort() + 38;
    f << "127.0.0.1:" << base << "\n127.0.0.1:" << base + 1 << "\n";
  }
  for (const auto& [flags, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--probe-every=-2"}, "--probe-every"},
           {{"--compress=auto", "--probe-every=-1"}, "--probe-every -1"},
           {{"--compress=auto", "--comm-budget=-0.5"}, "--comm-budget"},
           {{"--compress=bf16", "--comm-budget=0.5"}, "--compress auto only"},
           {{"--compress=auto", "--zstd-level=30"}, "--zstd-level"}}) {
    std::vector<std::string> args = TrainFlags(tmp);
    args.insert(args.end(), {"--hosts", hosts, "--rank=0", "--wait=60"});
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult r = rt::integration::RunRingtrain(args, tmp.path(), 30);
    INFO(flags[flags.size() - 1], " stderr:\n", r.err);
    CHECK_FALSE(r.timed_out);  // refused at once, not after --wait
    CHECK(r.exit_code == 1);
    CHECK(Contains(r.err, expected));
  }
}
