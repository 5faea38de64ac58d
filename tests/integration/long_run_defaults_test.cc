// Defaults for a run of weeks on a fleet of unequal VPSes: (1) under default flags
// (--precision auto) a peer capped to the AVX2 path (RINGTRAIN_ISA=avx2,
// ONEDNN_MAX_CPU_ISA=AVX2: no bf16 there) and a peer on the best path of this CPU train
// together to the end, each in its own precision, with bit-identical replicas at every
// step; (2) --ckpt-minutes checkpoints on time, and both writers (the leader and its
// successor, each in its own directory) write the same steps even when only one of them
// counts minutes (the vote travels in the step's sum), with --zero 1, whose checkpoints
// are a collective that every member must agree on. Bounded (~1 min).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "model/matmul_speed.h"
#include "process_group.h"
#include "temp_dir.h"

namespace {

using rt::integration::JsonField;
using rt::integration::NonEmptyLines;
using rt::integration::ProcessGroup;
using rt::integration::ReadFile;
using rt::integration::RunResult;
using rt::integration::TempDir;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Synthetic data: a repeating pattern with noise, vocab 50.
void WriteData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 800;
  std::vector<uint32_t> train(train_n), val(val_n);
  for (size_t i = 0; i < train_n; ++i) train[i] = static_cast<uint32_t>((i * 7 + i / 13) % 50);
  for (size_t i = 0; i < val_n; ++i) val[i] = static_cast<uint32_t>((i * 7 + i / 11) % 50);
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

std::string WriteHosts(const TempDir& tmp, int base_port) {
  const std::string path = tmp / "hosts";
  std::ofstream f(path);
  f << "127.0.0.1:" << base_port << "\n127.0.0.1:" << base_port + 1 << "\n";
  return path;
}

// `train` of a tiny model on the 2-peer ring of `hosts`, as rank `rank`, with `extra`.
std::vector<std::string> PeerArgv(const TempDir& tmp, const std::string& hosts, int rank,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {
      RINGTRAIN_BINARY, "train",        "--data",         tmp / "data",
      "--hosts",        hosts,          "--rank",         std::to_string(rank),
      "--layers=2",     "--heads=2",    "--dim=32",       "--seq-len=16",
      "--batch=4",      "--threads=1",  "--eval-every=0", "--wait=30",
      "--metrics",      tmp / "m.jsonl"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// The `step-*` directories of a checkpoint directory.
std::set<std::string> CheckpointSteps(const std::string& dir) {
  std::set<std::string> steps;
  if (!std::filesystem::exists(dir)) return steps;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0) steps.insert(name);
  }
  return steps;
}

}  // namespace

TEST_CASE("defaults: an AVX2 peer and a peer on this CPU's best path train together") {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::string hosts = WriteHosts(tmp, rt::integration::TestBasePort() + 0);
  const int steps = 20;
  ProcessGroup group(tmp.path());
  // No --precision: the default, auto.
  group.Start(PeerArgv(tmp, hosts, 0, {"--steps=" + std::to_string(steps), "--check-every=1"}),
              {"OMP_NUM_THREADS=1"});
  group.Start(PeerArgv(tmp, hosts, 1, {"--steps=" + std::to_string(steps), "--check-every=1"}),
              {"OMP_NUM_THREADS=1", "RINGTRAIN_ISA=avx2", "ONEDNN_MAX_CPU_ISA=AVX2"});
  const std::vector<RunResult> r = group.WaitAll(120);
  for (int i = 0; i < 2; ++i) {
    INFO("peer ", i, " stderr:\n", r[i].err);
    REQUIRE(r[i].exit_code == 0);
  }
  // Peer 1 ran the AVX2 path in fp32; peer 0 in bf16 where its path has it natively
  // (this process has peer 0's environment, so any ISA cap on the suite applies here too:
  // under AVX512_CORE bf16 is only emulated, and auto picks fp32).
  CHECK(Contains(r[1].err, "kernels avx2"));
  CHECK(Contains(r[1].err, "params, fp32,"));
  const bool native_bf16 = rt::model::GetBf16Support() == rt::model::Bf16Support::kNative;
  if (native_bf16) {
    CHECK(Contains(r[0].err, "params, bf16,"));
  } else {
    MESSAGE("this CPU has no native bf16: both peers compute in fp32");
  }
  // Every step on both peers, with one param_hash per step.
  std::vector<std::string> lines[2];
  for (int i = 0; i < 2; ++i) {
    lines[i] = NonEmptyLines(ReadFile(tmp / ("m.rank" + std::to_string(i) + ".jsonl")));
    REQUIRE(static_cast<int>(lines[i].size()) == steps);
  }
  for (int s = 0; s < steps; ++s) {
    INFO("step ", s + 1);
    CHECK(JsonField(lines[0][s], "param_hash") == JsonField(lines[1][s], "param_hash"));
    CHECK(JsonField(lines[0][s], "peers") == "2");
  }
}

TEST_CASE("defaults: --ckpt-minutes checkpoints on time, both writers at the same steps") {
  TempDir tmp;
  WriteData(tmp / "data");
  const std::string hosts = WriteHosts(tmp, rt::integration::TestBasePort() + 2);
  const int steps = 300;
  ProcessGroup group(tmp.path());
  // 0.002 minutes = 0.12 s: a tiny model's steps take milliseconds, so several come due.
  // --keep 0 keeps them all; --zero 1 makes each a collective of both peers.
  // Rank 1 counts no minutes itself (--ckpt-minutes=0): it checkpoints at the same steps
  // only because rank 0's votes reach it through the step's sum.
  for (int rank = 0; rank < 2; ++rank) {
    group.Start(PeerArgv(tmp, hosts, rank,
                         {"--steps=" + std::to_string(steps), "--zero=1",
                          rank == 0 ? "--ckpt-minutes=0.002" : "--ckpt-minutes=0", "--keep=0",
                          "--ckpt-dir", tmp / ("ckpt" + std::to_string(rank))}),
                {"OMP_NUM_THREADS=1"});
  }
  const std::vector<RunResult> r = group.WaitAll(150);
  for (int i = 0; i < 2; ++i) {
    INFO("peer ", i, " stderr:\n", r[i].err);
    REQUIRE(r[i].exit_code == 0);
  }
  const std::set<std::string> a = CheckpointSteps(tmp / "ckpt0");
  const std::set<std::string> b = CheckpointSteps(tmp / "ckpt1");
  std::string listed;
  for (const std::string& s : a) listed += s + " ";
  INFO("rank 0's checkpoints: ", listed);
  CHECK(a.count("step-00000300") == 1);  // the final one
  CHECK(a.size() >= 3);                  // and at least two on time before it
  CHECK(a == b);                         // the leader and its successor agreed on every one
}
