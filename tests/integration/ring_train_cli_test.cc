// `ringtrain train --hosts` on loopback rings: 3 dense peers train
// the same model as one peer with --accum 3; every peer's param_hash agrees at every
// step; bf16 and top-k compression keep the replicas bit-identical; a peer with
// another config is refused naming the difference; a peer that never comes ends with
// a clear error after --wait; a peer killed with -9 mid-run is dropped, the others
// carry on, and restarted it rejoins with the same weights; one SIGTERM stops every
// peer at one step with a checkpoint and exit 0; resume is the default and a peer
// without the checkpoint receives it.
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cli_runner.h"
#include "data/token_dataset.h"
#include "process_group.h"

namespace {

using rt::integration::JsonField;
using rt::integration::LocalRingArgv;
using rt::integration::NonEmptyLines;
using rt::integration::PidWithArgs;
using rt::integration::ReadFile;
using rt::integration::RunCommand;
using rt::integration::RunResult;
using rt::integration::TempDir;
using rt::integration::WaitForLines;

// Synthetic data: a repeating pattern with noise, vocab 50, 3 source bytes per token.
void WriteData(const std::string& dir, size_t train_n = 20000, size_t val_n = 800) {
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

std::vector<std::string> TrainFlags(const TempDir& tmp, const std::string& lr = "3e-3") {
  return {"train",      "--data",         tmp / "data",       "--layers=2",    "--heads=2",
          "--dim=32",   "--seq-len=16",   "--batch=4",        "--threads=1",   "--warmup=0",
          "--lr=" + lr, "--min-lr=" + lr, "--precision=fp32", "--eval-every=0"};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// tools/local-ring N -- <args> --wait=30, bounded by `timeout_s`.
RunResult LocalRing(const TempDir& tmp, int peers, int base_port,
                    const std::vector<std::string>& args, int timeout_s = 150) {
  std::vector<std::string> argv = LocalRingArgv(peers, base_port, timeout_s);
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--wait=30");
  return RunCommand(argv, tmp.path(), timeout_s,
                    {std::string("RINGTRAIN=") + RINGTRAIN_BINARY, "OMP_NUM_THREADS=1"});
}

std::string WriteHosts(const TempDir& tmp, int peers, int base_port) {
  const std::string path = tmp / "hosts";
  std::ofstream f(path);
  for (int r = 0; r < peers; ++r) f << "127.0.0.1:" << base_port + r << "\n";
  return path;
}

// A normal end: no line of `log` after the last view began training
// looks like a failure. Only the end is checked: under load, a control link that
// breaks while the first view forms can make a second view at startup (logged as a
// pause and a step redone), which is recovery, not the end this checks.
void CheckCleanLog(const std::string& log) {
  const std::vector<std::string> lines = NonEmptyLines(log);
  size_t from = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (Contains(lines[i], "training in view epoch")) from = i;
  }
  for (size_t i = from; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    INFO(line);
    CHECK_FALSE(Contains(line, "link broken"));
    CHECK_FALSE(Contains(line, "paused"));
    CHECK_FALSE(Contains(line, " W]"));
    CHECK_FALSE(Contains(line, " E]"));
  }
}

// Params of the newest checkpoint in `dir`.
std::vector<float> CheckpointParams(const std::string& dir) {
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(dir, &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().message());
  std::vector<float> params(ckpt->SectionBytes("params") / sizeof(float));
  REQUIRE(ckpt->ReadSection("params", absl::MakeSpan(reinterpret_cast<uint8_t*>(params.data()),
                                                     params.size() * sizeof(float)))
              .ok());
  return params;
}

// Every peer's metrics file (m.rank<R>.jsonl): `steps` lines each, the same
// param_hash at every step on every peer, peers/rank fields right. Returns rank 0's lines.
std::vector<std::string> CheckPeerMetrics(const TempDir& tmp, int peers, int steps) {
  std::vector<std::vector<std::string>> lines(peers);
  for (int r = 0; r < peers; ++r) {
    lines[r] = NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(r) + ".jsonl")));
    REQUIRE(static_cast<int>(lines[r].size()) == steps);
  }
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < peers; ++r) {
      INFO("step ", s + 1, " rank ", r);
      CHECK(JsonField(lines[r][s], "step") == std::to_string(s + 1));
      CHECK(JsonField(lines[r][s], "peers") == std::to_string(peers));
      CHECK(JsonField(lines[r][s], "rank") == std::to_string(r));
      CHECK(std::stod(JsonField(lines[r][s], "bytes_sent")) > 0);
      CHECK(JsonField(lines[r][s], "param_hash") == JsonField(lines[0][s], "param_hash"));
      CHECK(JsonField(lines[r][s], "loss") == JsonField(lines[0][s], "loss"));
    }
  }
  return lines[0];
}

}  // namespace

namespace {

// One peer with --accum 3 against 3 dense peers (`model_flags` picks the model, e.g.
// --arch=llama), `steps` steps from ring port offset `port_offset`: every peer's
// param_hash agrees at every step, the global batch is the same, and the leader's final
// weights match the single peer's to 1e-5 of the weights' scale.
void CheckRingEqualsAccum(const std::vector<std::string>& model_flags, int steps, int port_offset) {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::string kLr = "1e-3";
  const std::vector<std::string> flags = Concat(TrainFlags(tmp, kLr), model_flags);
  RunResult single = rt::integration::RunRingtrain(
      Concat(flags, {"--accum=3", "--steps=" + std::to_string(steps), "--ckpt-dir", tmp / "single",
                     "--metrics", tmp / "single.jsonl"}),
      tmp.path(), 120);
  INFO("single stderr:\n", single.err);
  REQUIRE(single.exit_code == 0);

  const int base = rt::integration::TestBasePort() + port_offset;
  RunResult ring =
      LocalRing(tmp, 3, base,
                Concat(flags, {"--steps=" + std::to_string(steps), "--check-every=1", "--ckpt-dir",
                               tmp / "ring", "--ckpt-shared", "--metrics", tmp / "m.jsonl",
                               // the hosts-file order, so ring position == line (checked per step)
                               "--probe-every=-1"}));
  INFO("ring stdout:\n", ring.out, "\nring stderr:\n", ring.err);
  REQUIRE(ring.exit_code == 0);
  const std::string last = std::to_string(steps);
  CHECK(Contains(ring.out, "[r2] step " + std::string(5 - last.size(), ' ') + last + "/" + last));
  CHECK(Contains(ring.out, "(comm "));
  // Each peer tells the others when it finishes: they log it instead of a failure.
  CheckCleanLog(ring.err);
  CHECK(Contains(ring.err, " finished training at step " + last));

  const std::vector<std::string> rank0 = CheckPeerMetrics(tmp, 3, steps);
  const std::vector<std::string> one = NonEmptyLines(ReadFile(tmp / "single.jsonl"));
  REQUIRE(one.size() == rank0.size());
  CHECK(JsonField(one.back(), "tokens") == JsonField(rank0.back(), "tokens"));  // same global batch

  // Only the leader wrote (one checkpoint dir, shared here), and its weights match.
  const std::vector<float> a = CheckpointParams(tmp / "single");
  const std::vector<float> b = CheckpointParams(tmp / "ring");
  REQUIRE(a.size() == b.size());
  // Float sums in another order (slots are grouped differently) can flip the sign of
  // a near-zero gradient, which Adam turns into a full-size update of a tiny weight:
  // so differences are measured relative to the weights' scale.
  double max_abs = 0, max_weight = 0, diff2 = 0, norm2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    max_abs = std::max(max_abs, d);
    max_weight = std::max(max_weight, std::fabs(static_cast<double>(a[i])));
    diff2 += d * d;
    norm2 += static_cast<double>(a[i]) * a[i];
  }
  MESSAGE("3 peers vs --accum 3 after ", steps, " steps (lr ", kLr, "): max |diff| ", max_abs,
          ", relative to the largest weight ", max_abs / max_weight, ", relative L2 ",
          std::sqrt(diff2 / norm2));
  CHECK(max_abs / max_weight <= 1e-5);
  CHECK(std::sqrt(diff2 / norm2) <= 1e-5);
}

}  // namespace

TEST_CASE("ring: 3 dense peers on loopback equal one peer with --accum 3") {
  CheckRingEqualsAccum({}, 50, 0);
}

// The llama block (RMSNorm, RoPE, SwiGLU, no biases, tied embeddings) through the same
// flat buffer, reducer and optimizer: the same equality.
TEST_CASE("ring: 3 llama peers on loopback equal one llama peer with --accum 3") {
  CheckRingEqualsAccum({"--arch=llama"}, 30, 28);
}

TEST_CASE("ring: bf16 and top-k compression train and keep peers bit-identical") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 4;
  for (const std::string codec : {"bf16", "topk:0.05"}) {
    INFO("codec ", codec);
    std::remove((tmp / "m.rank0.jsonl").c_str());
    std::remove((tmp / "m.rank1.jsonl").c_str());
    RunResult ring =
        LocalRing(tmp, 2, base + (codec == "bf16" ? 0 : 2),
                  // top-k: 5 dense steps, 5 of falling density, 20 preconditioned.
                  Concat(TrainFlags(tmp),
                         {"--steps=30", "--check-every=1", "--compress=" + codec, "--topk-warmup=5",
                          "--bucket-mb=0.01", "--metrics", tmp / "m.jsonl"}));
    INFO("ring stdout:\n", ring.out, "\nring stderr:\n", ring.err);
    REQUIRE(ring.exit_code == 0);
    CHECK(Contains(ring.err, "codec " + codec));
    if (codec != "bf16") CHECK(Contains(ring.err, "topk_warmup=5 preconditioned"));
    const std::vector<std::string> lines = CheckPeerMetrics(tmp, 2, 30);
    CHECK(std::stod(JsonField(lines.back(), "loss")) <
          std::stod(JsonField(lines.front(), "loss")) - 0.5);
  }
}

TEST_CASE(
    "ring: a peer with other settings exits within seconds naming them -- the other waits and "
    "trains once a correct peer joins") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 8;
  const std::string hosts = WriteHosts(tmp, 2, base);
  rt::integration::ProcessGroup group(tmp.path());
  const std::vector<std::string> env = {"OMP_NUM_THREADS=1"};
  const std::vector<std::string> common =
      Concat(TrainFlags(tmp), {"--steps=5", "--hosts", hosts, "--wait=60"});
  group.Start(Concat(Concat({RINGTRAIN_BINARY}, common), {"--rank=0"}), env);
  // Both hosts answer at once, so the odd one (a tie: the lower rank's settings stay)
  // knows within a heartbeat or two; --wait is 60 s.
  const auto start = std::chrono::steady_clock::now();
  RunResult odd =
      rt::integration::RunRingtrain(Concat(common, {"--rank=1", "--layers=3"}), tmp.path(), 60);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("odd peer stderr:\n", odd.err);
  MESSAGE("the peer with other settings exited after ", seconds, " s");
  CHECK_FALSE(odd.timed_out);
  CHECK(odd.exit_code == 1);
  CHECK(seconds < 10);
  const std::vector<std::string> odd_lines = NonEmptyLines(odd.err);
  REQUIRE_FALSE(odd_lines.empty());
  CHECK(Contains(odd_lines.back(),
                 "ringtrain train: this peer's settings differ from those of "
                 "127.0.0.1:" +
                     std::to_string(base)));
  CHECK(Contains(odd_lines.back(), "model layers: here '3', there '2'"));

  // The other keeps waiting, naming the refused peer's setting, and trains once a
  // peer with its settings comes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::string waiting = ReadFile(tmp / "proc0.err");
  CHECK(Contains(waiting, "model layers: here '2', there '3'"));
  group.Start(Concat(Concat({RINGTRAIN_BINARY}, common), {"--rank=1"}), env);
  const std::vector<RunResult> r = group.WaitAll(90);
  for (const RunResult& x : r) {
    INFO("stderr:\n", x.err);
    CHECK_FALSE(x.timed_out);
    CHECK(x.exit_code == 0);
    CHECK(Contains(x.out, "step     5/5"));
  }
}

TEST_CASE("ring: ring flags without --hosts and a bad --compress are refused") {
  TempDir tmp;
  WriteData(tmp / "data");
  for (const auto& [flag, expected] : std::vector<std::pair<std::string, std::string>>{
           {"--rank=1", "--rank needs --hosts"},
           {"--compress=bf16", "--compress needs --hosts"},
           {"--self=127.0.0.1:1", "--self needs --hosts"}}) {
    RunResult r =
        rt::integration::RunRingtrain(Concat(TrainFlags(tmp), {"--steps=2", flag}), tmp.path(), 60);
    INFO(flag, " stderr:\n", r.err);
    CHECK(r.exit_code == 2);
    CHECK(Contains(r.err, expected));
  }
  const std::string hosts = WriteHosts(tmp, 2, rt::integration::TestBasePort() + 22);
  RunResult bad = rt::integration::RunRingtrain(
      Concat(TrainFlags(tmp), {"--steps=2", "--hosts", hosts, "--rank=0", "--compress=zip"}),
      tmp.path(), 60);
  INFO("stderr:\n", bad.err);
  CHECK(bad.exit_code == 1);
  CHECK(Contains(bad.err, "--compress"));
  CHECK(Contains(bad.err, "zip"));
}

TEST_CASE("ring: a peer that never comes gives a clear error after --wait") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 11;
  const std::string hosts = WriteHosts(tmp, 2, base);
  const auto start = std::chrono::steady_clock::now();
  RunResult r = rt::integration::RunRingtrain(
      Concat(TrainFlags(tmp), {"--steps=5", "--hosts", hosts, "--rank=0", "--wait=3"}), tmp.path(),
      60);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("stderr:\n", r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK(Contains(r.err, "ringtrain train: not admitted to a training view within --wait 3 s"));
  CHECK(Contains(r.err, "no quorum"));
  CHECK(Contains(r.err, "127.0.0.1:" + std::to_string(base + 1)));
  CHECK(seconds < 30);
}

TEST_CASE("ring: kill -9 of a peer mid-run -- the others carry on, restarted it rejoins") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 14;
  const std::string hosts = WriteHosts(tmp, 3, base);
  const int steps = 1500;  // seconds of training: the kill and the rejoin land mid-run
  rt::integration::ProcessGroup group(tmp.path());
  const std::vector<std::string> common = Concat(
      {RINGTRAIN_BINARY},
      Concat(TrainFlags(tmp), {"--steps=" + std::to_string(steps), "--hosts", hosts, "--wait=60",
                               "--check-every=5", "--metrics", tmp / "m.jsonl", "--ckpt-dir",
                               tmp / "ckpt", "--ckpt-shared", "--ckpt-every=100"}));
  for (int r = 0; r < 3; ++r) {
    group.Start(Concat(common, {"--rank=" + std::to_string(r)}), {"OMP_NUM_THREADS=1"});
  }
  REQUIRE(WaitForLines(tmp / "m.rank2.jsonl", 20));
  group.Kill(2);
  // The survivors train on in a view of two, within seconds.
  const size_t at_kill = NonEmptyLines(ReadFile(tmp / "m.rank0.jsonl")).size();
  REQUIRE(WaitForLines(tmp / "m.rank0.jsonl", at_kill + 20, 30));
  CHECK(Contains(ReadFile(tmp / "proc0.err"), "peers [127.0.0.1:" + std::to_string(base) +
                                                  " 127.0.0.1:" + std::to_string(base + 1) + "]"));
  // The same command line again: admitted at a step boundary, it receives the state.
  group.Start(Concat(common, {"--rank=2"}), {"OMP_NUM_THREADS=1"});
  const std::vector<RunResult> r = group.WaitAll(150);
  for (size_t i : {0, 1, 3}) {
    INFO("process ", i, " stderr:\n", r[i].err);
    CHECK_FALSE(r[i].timed_out);
    CHECK(r[i].exit_code == 0);
  }
  CHECK(Contains(r[0].err, "step failed in view epoch"));
  CHECK(Contains(r[3].err, "state transfer: received"));
  CHECK(Contains(r[0].err, "state transfer: served"));
  // Everyone ends at the last step with the same weights, in a view of three.
  std::string hash;
  for (int rank = 0; rank < 3; ++rank) {
    const std::vector<std::string> lines =
        NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(rank) + ".jsonl")));
    REQUIRE(!lines.empty());
    INFO("rank ", rank, ": ", lines.back());
    CHECK(JsonField(lines.back(), "step") == std::to_string(steps));
    CHECK(JsonField(lines.back(), "peers") == "3");
    CHECK(std::stoi(JsonField(lines.back(), "epoch")) >= 3);
    if (rank == 0) hash = JsonField(lines.back(), "param_hash");
    CHECK(JsonField(lines.back(), "param_hash") == hash);
  }
  // Rank 0 logged every step it applied: all of them, except a step it received
  // (it was behind when a view formed; at most one per view change).
  const std::vector<std::string> rank0 = NonEmptyLines(ReadFile(tmp / "m.rank0.jsonl"));
  CHECK(rank0.size() <= static_cast<size_t>(steps));
  CHECK(rank0.size() >= static_cast<size_t>(steps - 2));
}

TEST_CASE("ring: SIGTERM to one peer stops all at one step, the leader checkpoints, all exit 0") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 24;
  const std::string hosts = WriteHosts(tmp, 3, base);
  rt::integration::ProcessGroup group(tmp.path());
  const std::vector<std::string> common = Concat(
      {RINGTRAIN_BINARY},
      Concat(TrainFlags(tmp), {"--steps=1000000", "--hosts", hosts, "--wait=60", "--metrics",
                               tmp / "m.jsonl", "--ckpt-dir", tmp / "ckpt", "--ckpt-shared"}));
  for (int r = 0; r < 3; ++r) {
    group.Start(Concat(common, {"--rank=" + std::to_string(r)}), {"OMP_NUM_THREADS=1"});
  }
  REQUIRE(WaitForLines(tmp / "m.rank1.jsonl", 10));
  const pid_t pid = PidWithArgs(hosts, "--rank=1");
  REQUIRE(pid > 0);
  kill(pid, SIGTERM);
  const std::vector<RunResult> r = group.WaitAll(60);
  std::string last_step;
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank ", rank, " stderr:\n", r[rank].err);
    CHECK_FALSE(r[rank].timed_out);
    CHECK(r[rank].exit_code == 0);
    CHECK(Contains(r[rank].err, "stopped cleanly after step"));
    CheckCleanLog(r[rank].err);
    const std::vector<std::string> lines =
        NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(rank) + ".jsonl")));
    REQUIRE(!lines.empty());
    if (rank == 0) last_step = JsonField(lines.back(), "step");
    CHECK(JsonField(lines.back(), "step") == last_step);  // all stopped after the same step
  }
  // The leader's checkpoint is of that step.
  std::vector<std::string> problems;
  auto ckpt = rt::ckpt::OpenLatestValidCheckpoint(tmp / "ckpt", &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().message());
  CHECK(std::to_string(ckpt->meta().step) == last_step);
  CHECK(Contains(r[0].err, "checkpoint step " + last_step));
}

TEST_CASE("ring: resume where only rank 0 has the checkpoint equals an uninterrupted run") {
  TempDir tmp;
  WriteData(tmp / "data");
  const int base = rt::integration::TestBasePort() + 18;
  const std::string hosts = WriteHosts(tmp, 2, base);
  // Runs both peers; rank r uses --ckpt-dir ckpt_dirs[r] and metrics <name>.rank<r>.jsonl.
  auto run = [&](const std::vector<std::string>& extra, const std::vector<std::string>& ckpt_dirs,
                 const std::string& metrics) {
    rt::integration::ProcessGroup group(tmp.path());
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> argv = Concat(
          {RINGTRAIN_BINARY},
          Concat(TrainFlags(tmp), {"--hosts", hosts, "--rank=" + std::to_string(r), "--wait=30",
                                   "--check-every=1", "--metrics", tmp / metrics,
                                   // runs equal bit for bit need the equal split: --balance
                                   // on follows measured speed (equal up to summation order)
                                   "--balance=off"}));
      if (!ckpt_dirs.empty()) argv = Concat(argv, {"--ckpt-dir", ckpt_dirs[r]});
      group.Start(Concat(argv, extra), {"OMP_NUM_THREADS=1"});
    }
    const std::vector<RunResult> r = group.WaitAll(90);
    for (const RunResult& x : r) {
      INFO("stderr:\n", x.err);
      REQUIRE(x.exit_code == 0);
    }
    return r;
  };
  run({"--steps=8"}, {}, "whole.jsonl");
  run({"--steps=4"}, {tmp / "ckpt0", tmp / "ckpt1"}, "part.jsonl");
  // Directories are not shared: the leader's successor wrote a copy.
  CHECK(CheckpointParams(tmp / "ckpt0") == CheckpointParams(tmp / "ckpt1"));
  std::filesystem::remove_all(tmp / "ckpt1");
  // Rank 1 has no checkpoint: it starts from the seed, then receives rank 0's state
  // (resuming is the default; --resume is still accepted).
  std::vector<RunResult> resumed =
      run({"--steps=8", "--resume"}, {tmp / "ckpt0", tmp / "ckpt1"}, "part.jsonl");
  CHECK(Contains(resumed[0].err, "resumed from"));
  CHECK(Contains(resumed[1].err, "state transfer: received step 4"));
  for (int r = 0; r < 2; ++r) {
    const std::string suffix = ".rank" + std::to_string(r) + ".jsonl";
    const std::vector<std::string> whole = NonEmptyLines(ReadFile(tmp / ("whole" + suffix)));
    const std::vector<std::string> part = NonEmptyLines(ReadFile(tmp / ("part" + suffix)));
    REQUIRE(whole.size() == 8);
    REQUIRE(part.size() == 8);
    for (int s = 0; s < 8; ++s) {
      CHECK(JsonField(part[s], "step") == std::to_string(s + 1));
      CHECK(JsonField(part[s], "param_hash") == JsonField(whole[s], "param_hash"));
    }
  }
}
