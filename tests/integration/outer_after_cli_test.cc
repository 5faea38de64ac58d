// `train --outer-after N` (per-step sync for N steps, then round sync in the same run)
// against the recipe it replaces: a per-step run checkpointed at step N, stopped, and
// the command started again with --outer-every. 2 loopback peers, per-step bf16 (with
// error feedback: the switch drops its residuals as a new process starts without them),
// then int8 outer exchanges with overlap, the switch in the middle of a round: every
// step after N has the recipe's param_hash and loss bit for bit, the steps before N
// are a plain per-step run's, and the end differs from that run (it never switched).
// Also the flag checks of --outer-after.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/manifest.h"
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

constexpr int kPeers = 2;
constexpr int kSwitch = 6;  // N: not a multiple of H, so the first round is short
constexpr int kSteps = 18;  // round ends 8, 12, 16 (launched beside the next), 18

void WriteData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 800;
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

// What every run shares. --balance off: per-step shares then do not follow measured
// speeds, so two runs sum the same gradients in the same order; no link probes: the
// ring keeps its order (which peer's AdamW follows which slots after the switch).
std::vector<std::string> Common(const TempDir& tmp, const std::string& ckpt,
                                const std::string& metrics) {
  return {"train",
          "--data",
          tmp / "data",
          "--layers=2",
          "--heads=2",
          "--dim=32",
          "--seq-len=16",
          "--batch=4",
          "--threads=1",
          "--warmup=2",
          "--lr=3e-3",
          "--min-lr=3e-4",
          "--precision=fp32",
          "--eval-every=0",
          "--global-batch=8",
          "--probe-every=-1",
          "--balance=off",
          "--bucket-mb=0.02",
          "--steps=" + std::to_string(kSteps),
          "--ckpt-every=" + std::to_string(kSwitch),
          "--keep=0",
          "--ckpt-shared",
          "--ckpt-dir",
          tmp / ckpt,
          "--metrics",
          tmp / (metrics + ".jsonl")};
}

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string> kRound = {"--outer-every=4", "--outer-compress=int8"};

RunResult LocalRing(const TempDir& tmp, int base_port, const std::vector<std::string>& args) {
  std::vector<std::string> argv = LocalRingArgv(kPeers, base_port, 120);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--wait=30");
  return RunCommand(argv, tmp.path(), 120,
                    {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
}

// metrics lines of run `name`, [rank][line]
std::vector<std::vector<std::string>> Lines(const TempDir& tmp, const std::string& name) {
  std::vector<std::vector<std::string>> lines(kPeers);
  for (int r = 0; r < kPeers; ++r) {
    lines[r] = NonEmptyLines(ReadFile(tmp / (name + ".rank" + std::to_string(r) + ".jsonl")));
  }
  return lines;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("--outer-after N: the bits of a per-step checkpoint at N resumed with --outer-every") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort();

  // In one run.
  RunResult switched =
      LocalRing(tmp, base,
                Plus(Plus(Common(tmp, "a_ckpt", "a"), kRound),
                     {"--compress=bf16", "--outer-after=" + std::to_string(kSwitch)}));
  INFO("--outer-after stderr:\n", switched.err);
  REQUIRE(switched.exit_code == 0);
  CHECK(Contains(switched.err, "switching to round sync after 6 per-step steps"));

  // The recipe: per-step to the end (a run that never switches), then its checkpoint of
  // step N alone is kept (as if SIGTERM had stopped it there: a stop checkpoints the
  // state of that step, the same bytes) and the command runs again with --outer-every.
  RunResult per_step =
      LocalRing(tmp, base + 4, Plus(Common(tmp, "b_ckpt", "b"), {"--compress=bf16"}));
  INFO("per-step stderr:\n", per_step.err);
  REQUIRE(per_step.exit_code == 0);
  bool kept = false;
  for (const auto& entry : std::filesystem::directory_iterator(tmp / "b_ckpt")) {
    int64_t step = -1;
    if (!rt::ckpt::ParseStepDirName(entry.path().filename().string(), &step)) continue;
    if (step == kSwitch) {
      kept = true;
    } else {
      std::filesystem::remove_all(entry.path());
    }
  }
  REQUIRE(kept);
  RunResult resumed = LocalRing(tmp, base + 8, Plus(Common(tmp, "b_ckpt", "b_resumed"), kRound));
  INFO("resumed stderr:\n", resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(Contains(resumed.err, "resumed from"));

  const auto a = Lines(tmp, "a");
  const auto plain = Lines(tmp, "b");
  const auto b = Lines(tmp, "b_resumed");
  for (int r = 0; r < kPeers; ++r) {
    REQUIRE(a[r].size() == kSteps);
    REQUIRE(plain[r].size() == kSteps);
    REQUIRE(b[r].size() == kSteps - kSwitch);
  }
  for (int r = 0; r < kPeers; ++r) {
    for (int s = 0; s < kSteps; ++s) {
      INFO("rank ", r, " step ", s + 1);
      if (s < kSwitch) {  // per-step sync: the plain run's steps
        CHECK(JsonField(a[r][s], "param_hash") == JsonField(plain[r][s], "param_hash"));
        CHECK(JsonField(a[r][s], "outer_step").empty());
        continue;
      }
      const std::string& want = b[r][s - kSwitch];
      REQUIRE(JsonField(want, "step") == std::to_string(s + 1));
      CHECK(JsonField(a[r][s], "param_hash") == JsonField(want, "param_hash"));
      CHECK(JsonField(a[r][s], "loss") == JsonField(want, "loss"));
    }
  }
  const std::string end = JsonField(a[0][kSteps - 1], "param_hash");
  CHECK(JsonField(a[1][kSteps - 1], "param_hash") == end);
  // Never switching ends elsewhere: the comparison above can fail.
  CHECK(JsonField(plain[0][kSteps - 1], "param_hash") != end);
  // Outer steps count from the switch: round ends 8, 12, 16, 18.
  CHECK(JsonField(a[0][kSteps - 1], "outer_step") == "4");
  // The checkpoint of step N is per-step sync's (no outer momentum), later ones round sync's.
  std::vector<std::string> problems;
  auto at_switch = rt::ckpt::Checkpoint::Open(tmp / ("a_ckpt/" + rt::ckpt::StepDirName(kSwitch)));
  REQUIRE_MESSAGE(at_switch.ok(), at_switch.status().message());
  CHECK(!at_switch->HasSection("outer_momentum"));
  auto last = rt::ckpt::OpenLatestValidCheckpoint(tmp / "a_ckpt", &problems);
  REQUIRE_MESSAGE(last.ok(), last.status().message());
  CHECK(last->meta().step == kSteps);
  CHECK(last->HasSection("outer_momentum"));
}

TEST_CASE("--outer-after: refused without round sync, below 0, past --steps, with top-k") {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::vector<std::string> base = {
      "train",    "--data",       tmp / "data", "--layers=2",  "--heads=2",
      "--dim=32", "--seq-len=16", "--batch=4",  "--threads=1", "--eval-every=0"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--outer-after=5", "--steps=10"}, "give --outer-every H > 0"},
      {{"--outer-every=4", "--outer-after=-1", "--steps=10"}, "--outer-after must be >= 0"},
      {{"--outer-every=4", "--outer-after=10", "--steps=10"}, "must be below --steps 10"},
      {{"--outer-every=4", "--outer-after=5", "--steps=10", "--compress=topk:0.1"},
       "take --compress none or bf16"},
  };
  for (const auto& [flags, want] : cases) {
    INFO(flags[0], " ", flags[1]);
    RunResult r = rt::integration::RunRingtrain(Plus(base, flags), tmp.path(), 60);
    CHECK(r.exit_code != 0);
    CHECK(Contains(r.err, want));
  }
  // Today's refusal of a per-step --compress with round sync from the start names the way out.
  RunResult from_start = rt::integration::RunRingtrain(
      Plus(base, {"--outer-every=4", "--compress=bf16", "--steps=10"}), tmp.path(), 60);
  CHECK(from_start.exit_code == 2);
  CHECK(Contains(from_start.err, "--outer-after N"));
  // plan has no switch to plan: it does not take the flag.
  RunResult plan =
      rt::integration::RunRingtrain({"plan", "--layers=2", "--heads=2", "--dim=32", "--peers=4",
                                     "--outer-every=4", "--outer-after=5"},
                                    tmp.path(), 60);
  CHECK(plan.exit_code != 0);
  CHECK(Contains(plan.err, "outer-after"));
}

TEST_CASE(
    "--inner-lr-scale: train and plan refuse it alike, and plan's figures do not depend on it") {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::vector<std::string> base = {
      "train",        "--data",    tmp / "data",  "--layers=2",     "--heads=2", "--dim=32",
      "--seq-len=16", "--batch=4", "--threads=1", "--eval-every=0", "--steps=10"};
  const std::vector<std::string> plan = {"plan",      "--layers=2",     "--heads=2",
                                         "--dim=32",  "--seq-len=16",   "--batch=4",
                                         "--peers=4", "--link-mbps=100"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--inner-lr-scale=2"}, "give --outer-every H > 0"},
      {{"--outer-every=4", "--inner-lr-scale=0"}, "--inner-lr-scale must be in (0, 10]"},
      {{"--outer-every=4", "--inner-lr-scale=11"}, "--inner-lr-scale must be in (0, 10]"},
  };
  for (const auto& [flags, want] : cases) {
    INFO(flags[0]);
    RunResult t = rt::integration::RunRingtrain(Plus(base, flags), tmp.path(), 60);
    CHECK(t.exit_code == 2);
    CHECK(Contains(t.err, want));
    RunResult p = rt::integration::RunRingtrain(Plus(plan, flags), tmp.path(), 60);
    CHECK(p.exit_code == 2);
    CHECK(Contains(p.err, want));
  }
  RunResult with = rt::integration::RunRingtrain(
      Plus(plan, {"--outer-every=30", "--inner-lr-scale=1.5"}), tmp.path(), 60);
  RunResult without =
      rt::integration::RunRingtrain(Plus(plan, {"--outer-every=30"}), tmp.path(), 60);
  CHECK(with.exit_code == 0);
  CHECK(without.exit_code == 0);
  CHECK(!with.out.empty());
  CHECK(with.out == without.out);
}
