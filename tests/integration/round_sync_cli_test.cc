// `train --outer-every H` (round sync) as users run it: 3 loopback peers with int8 outer
// exchanges hold one param_hash at every outer step and send nothing between them; the
// leader's checkpoint (with the outer momentum) resumes on 2 peers; with overlap a ring
// SIGTERM stops every peer at a round's end (the vote travels with the exchange in
// flight, the round then drains) with a checkpoint of that step; train and plan
// refuse the combinations that cannot work, naming the flags.
#include <doctest/doctest.h>

#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "ckpt/checkpoint.h"
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

void WriteData(const std::string& dir, size_t train_n = 20000, size_t val_n = 800) {
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

std::vector<std::string> TrainFlags(const TempDir& tmp) {
  return {
      "train",           "--data",        tmp / "data",       "--layers=2",     "--heads=2",
      "--dim=32",        "--seq-len=16",  "--batch=4",        "--threads=1",    "--warmup=0",
      "--lr=3e-3",       "--min-lr=3e-3", "--precision=fp32", "--eval-every=0", "--global-batch=12",
      "--probe-every=-1"};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

RunResult LocalRing(const TempDir& tmp, int peers, int base_port,
                    const std::vector<std::string>& args, int timeout_s = 120) {
  std::vector<std::string> argv = LocalRingArgv(peers, base_port, timeout_s);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--wait=30");
  return RunCommand(argv, tmp.path(), timeout_s,
                    {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
}

std::vector<std::vector<std::string>> PeerLines(const TempDir& tmp, int peers) {
  std::vector<std::vector<std::string>> lines(peers);
  for (int r = 0; r < peers; ++r) {
    lines[r] = NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(r) + ".jsonl")));
  }
  return lines;
}

}  // namespace

TEST_CASE("round sync: 3 peers with int8 agree at every outer step, resume on 2 peers") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort();
  const std::vector<std::string> round = {
      "--outer-every=4",    "--outer-compress=int8", "--bucket-mb=0.02", "--ckpt-dir",
      tmp / "ckpt",         "--ckpt-shared",         "--metrics",        tmp / "m.jsonl",
      "--outer-overlap=off"};
  RunResult three = LocalRing(tmp, 3, base, Concat(Concat(TrainFlags(tmp), round), {"--steps=12"}));
  INFO("3 peers stderr:\n", three.err);
  REQUIRE(three.exit_code == 0);
  const auto lines = PeerLines(tmp, 3);
  for (int r = 0; r < 3; ++r) REQUIRE(lines[r].size() == 12);
  for (int s = 0; s < 12; ++s) {
    INFO("step ", s + 1);
    const bool outer = (s + 1) % 4 == 0;
    CHECK(JsonField(lines[0][s], "outer_step") == std::to_string((s + 1) / 4));
    for (int r = 0; r < 3; ++r) {
      if (outer) {
        CHECK(JsonField(lines[r][s], "param_hash") == JsonField(lines[0][s], "param_hash"));
        CHECK(std::stod(JsonField(lines[r][s], "outer_bytes")) > 0);
        CHECK(std::stod(JsonField(lines[r][s], "pseudo_grad_norm")) > 0);
        CHECK(!JsonField(lines[r][s], "outer_ms").empty());
      } else {
        CHECK(JsonField(lines[r][s], "bytes_sent") == "0");  // inner steps: no communication
      }
    }
  }
  CHECK(std::stod(JsonField(lines[0][11], "loss")) < std::stod(JsonField(lines[0][0], "loss")));
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(tmp / "ckpt", &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().message());
  CHECK(ckpt->meta().step == 12);
  CHECK(ckpt->HasSection("outer_momentum"));

  // The same run continues on 2 peers from the checkpoint of step 12.
  for (int r = 0; r < 3; ++r)
    std::remove((tmp / ("m.rank" + std::to_string(r) + ".jsonl")).c_str());
  RunResult two =
      LocalRing(tmp, 2, base + 4, Concat(Concat(TrainFlags(tmp), round), {"--steps=16"}));
  INFO("2 peers stderr:\n", two.err);
  REQUIRE(two.exit_code == 0);
  CHECK(Contains(two.err, "resumed from"));
  const auto more = PeerLines(tmp, 2);
  REQUIRE(more[0].size() == 4);
  REQUIRE(more[1].size() == 4);
  CHECK(JsonField(more[0][3], "step") == "16");
  CHECK(JsonField(more[0][3], "outer_step") == "4");
  CHECK(JsonField(more[1][3], "param_hash") == JsonField(more[0][3], "param_hash"));
}

TEST_CASE(
    "round sync with overlap: one SIGTERM stops every peer at a round's end, drained, with its "
    "checkpoint") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 10;
  rt::integration::ProcessGroup group(tmp.path());
  std::vector<std::string> argv = LocalRingArgv(3, base, 110);
  for (const std::string& a :
       Concat(TrainFlags(tmp),
              {"--outer-every=5", "--outer-overlap=on", "--steps=100000", "--ckpt-dir",
               tmp / "ckpt", "--ckpt-shared", "--metrics", tmp / "m.jsonl", "--wait=30"})) {
    argv.push_back(a);
  }
  group.Start(argv, {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
  REQUIRE(rt::integration::WaitForLines(tmp / "m.rank1.jsonl", 7));
  // SIGTERM to peer 1 only, found by this test's own metrics path (a bare "m.jsonl" also
  // matched the peers of other tests running at the same time) and its rank.
  pid_t peer1 = -1;
  for (int tries = 0; tries < 50 && peer1 < 0; ++tries) {
    peer1 = rt::integration::PidWithArgs(tmp / "m.jsonl", "--rank 1");
  }
  REQUIRE(peer1 > 0);
  REQUIRE(kill(peer1, SIGTERM) == 0);
  const std::vector<RunResult> r = group.WaitAll(100);
  INFO("stderr:\n", r[0].err);
  REQUIRE(r[0].exit_code == 0);
  const auto lines = PeerLines(tmp, 3);
  const std::string last = JsonField(lines[0].back(), "step");
  REQUIRE(!last.empty());
  CHECK(std::stoi(last) % 5 == 0);  // a round's end
  for (int p = 1; p < 3; ++p) {
    CHECK(JsonField(lines[p].back(), "step") == last);
    CHECK(JsonField(lines[p].back(), "param_hash") == JsonField(lines[0].back(), "param_hash"));
  }
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(tmp / "ckpt", &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().message());
  CHECK(std::to_string(ckpt->meta().step) == last);
}

TEST_CASE("round sync: train and plan refuse what cannot work, naming the flags") {
  TempDir tmp;
  WriteData(tmp / "data", 2000, 200);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--outer-every=5", "--zero=1"}, "--zero 1"},
      {{"--outer-every=5", "--compress=bf16"}, "--compress bf16"},
      {{"--outer-every=-1"}, "--outer-every"},
      {{"--outer-every=5", "--outer-compress=int3"}, "--outer-compress"},
      {{"--outer-compress=int8"}, "--outer-every H > 0"},
      {{"--outer-every=5", "--outer-momentum=1"}, "--outer-momentum"},
      {{"--outer-every=5", "--outer-overlap=yes"}, "--outer-overlap"},
      {{"--outer-every=5", "--outer-shard=maybe"}, "--outer-shard"},
      {{"--outer-shard=on"}, "--outer-every H > 0"},
      {{"--outer-every=5", "--outer-shard=on"}, "--outer-overlap off"},  // overlap: default on
      {{"--outer-every=5", "--outer-overlap=off", "--outer-compress=int8", "--outer-shard=on"},
       "--outer-compress none"},
  };
  for (const auto& [flags, want] : cases) {
    INFO(absl::StrJoin(flags, " "));
    RunResult train = rt::integration::RunRingtrain(
        Concat(Concat(TrainFlags(tmp), {"--steps=2"}), flags), tmp.path(), 60);
    CHECK(train.exit_code == 2);
    CHECK(Contains(train.err, want));
    RunResult plan = rt::integration::RunRingtrain(
        Concat({"plan", "--layers=2", "--heads=2", "--dim=32", "--peers=4"}, flags), tmp.path(),
        60);
    CHECK(plan.exit_code == 2);
    CHECK(Contains(plan.err, want));
  }
}
