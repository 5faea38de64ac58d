// `train --hosts --zero 1` (ZeRO-1: AdamW moments sharded
// over the ring, trainer_zero.cc) on loopback rings of a tiny model:
//   - --zero 1 equals --zero 0 bit for bit (param_hash at every step), dense and bf16,
//     with clipping active;
//   - kill -9 of a non-leader, then of the leader, each restarted: the pieces move to
//     the new rings, every peer ends at one step and hash, and the final loss is the
//     uninterrupted --zero 1 run's;
//   - checkpoints written by a --zero 1 ring resume at another peer count, alone, and
//     with --zero 0; a corrupt moment section makes that checkpoint invalid and the
//     previous one is used.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "fault_harness.h"
#include "process_group.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::ProcessGroup;
using rt::integration::RunRingtrain;
using rt::integration::TempDir;
using rt::integration::TestBasePort;

constexpr int kGlobalBatch = 24;

std::vector<std::string> ZeroArgs(const std::string& data, int64_t steps, int zero,
                                  const std::string& compress = "none") {
  std::vector<std::string> a = TinyTrainArgs(data, static_cast<int>(steps), kGlobalBatch);
  a.push_back("--zero=" + std::to_string(zero));
  a.push_back("--compress=" + compress);
  a.push_back("--clip=0.05");        // clipping in every step: the global norm matters
  a.push_back("--bucket-mb=0.004");  // several buckets, each cut in pieces per peer
  a.push_back("--check-every=1");    // replicas compared every step
  // Bits depend on who sums what: equal shares and the hosts-file order in both modes
  // (a probe may re-order a --zero 0 ring; --zero 1 rings keep their order).
  a.push_back("--balance=off");
  a.push_back("--probe-every=-1");
  return a;
}

// Runs `n` peers to the end; every peer's metrics (checked: all exit 0).
std::vector<std::vector<Metric>> RunToEnd(const std::string& dir, int n,
                                          const std::vector<std::string>& args, int port,
                                          const std::vector<std::string>& extra = {}) {
  FaultCluster c(dir, n, args, port);
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  c.WriteHostsAll(all);
  for (int i = 0; i < n; ++i) c.Start(i, extra);
  for (int i = 0; i < n; ++i) {
    std::optional<int> code = c.WaitExit(i, 150);
    REQUIRE_MESSAGE(code.has_value(), "peer " << i << " did not finish\n" << c.Dump());
    REQUIRE_MESSAGE(*code == 0, "peer " << i << " exit " << *code << "\n" << c.Dump());
  }
  c.Poll();
  std::vector<std::vector<Metric>> out;
  for (int i = 0; i < n; ++i) out.push_back(c.Metrics(i));
  return out;
}

// param_hash per step (the last report of each step) of one peer.
std::map<int64_t, std::string> HashByStep(const std::vector<Metric>& ms) {
  std::map<int64_t, std::string> h;
  for (const Metric& m : ms) h[m.step] = m.hash;
  return h;
}

}  // namespace

TEST_CASE("zero: --zero 1 trains bit for bit like --zero 0 -- 4 peers dense, 3 peers bf16") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  struct Case {
    int peers;
    std::string compress;
  };
  int k = 0;
  for (const Case& cs : {Case{4, "none"}, Case{3, "bf16"}}) {
    CAPTURE(cs.peers);
    CAPTURE(cs.compress);
    const std::string name = cs.compress + std::to_string(cs.peers);
    const auto zero0 = RunToEnd(tmp / (name + "-z0"), cs.peers,
                                ZeroArgs(tmp / "data", 12, 0, cs.compress), base + 10 * k++);
    const auto zero1 = RunToEnd(tmp / (name + "-z1"), cs.peers,
                                ZeroArgs(tmp / "data", 12, 1, cs.compress), base + 10 * k++);
    const std::map<int64_t, std::string> ref = HashByStep(zero0[0]);
    REQUIRE(ref.size() >= 12);
    for (int p = 0; p < cs.peers; ++p) {
      const std::map<int64_t, std::string> got = HashByStep(zero1[p]);
      CHECK(got.size() == ref.size());
      for (const auto& [step, hash] : ref) {
        const auto it = got.find(step);
        REQUIRE_MESSAGE(it != got.end(), "peer " << p << " has no step " << step);
        CHECK_MESSAGE(it->second == hash, "peer " << p << " of the --zero 1 ring, step " << step);
        if (it->second != hash) break;  // the first step that differs says enough
      }
    }
  }
}

TEST_CASE(
    "zero: --zero 1 with the default --balance on, one peer slowed -- shares move, same loss") {
  // Every other --zero 1 test pins --balance off. Here peer 1 shares its core with two
  // busy loops: balancing gives it fewer slots, each step's slots still sum to the global
  // batch, the replicas agree at every step (--check-every 1), and the run ends at the
  // loss of --zero 0 with equal shares (a step's windows never depend on who computes them).
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  constexpr int kSteps = 20;
  std::vector<std::string> balanced = ZeroArgs(tmp / "data", kSteps, 1);
  balanced.erase(std::find(balanced.begin(), balanced.end(), "--balance=off"));
  ProcessGroup burner(tmp.path());
  for (int i = 0; i < 2; ++i) {
    burner.Start({"/usr/bin/taskset", "-c", "1", "/bin/sh", "-c", "while :; do :; done"});
  }
  FaultCluster c(tmp / "on", FaultCluster::LoopbackEndpoints(2, base + 10), balanced, [](int i) {
    return std::vector<std::string>{"/usr/bin/taskset", "-c", std::to_string(i)};
  });
  c.WriteHostsAll({0, 1});
  c.Start(0);
  c.Start(1);
  for (int i = 0; i < 2; ++i) {
    std::optional<int> code = c.WaitExit(i, 150);
    REQUIRE_MESSAGE(code.has_value(), "peer " << i << " did not finish\n" << c.Dump());
    REQUIRE_MESSAGE(*code == 0, "peer " << i << " exit " << *code << "\n" << c.Dump());
  }
  burner.KillAll();
  c.Poll();
  std::map<int64_t, int> slots[2];
  std::map<int64_t, std::string> hash[2];
  for (int i = 0; i < 2; ++i) {
    for (const Metric& m : c.Metrics(i)) {
      if (m.step <= 0) continue;
      slots[i][m.step] = static_cast<int>(rt::integration::JsonNumber(m.line, "slots"));
      hash[i][m.step] = m.hash;
    }
  }
  int uneven = 0;
  std::string table;
  for (int64_t s = 1; s <= kSteps; ++s) {
    CAPTURE(s);
    REQUIRE(slots[0].count(s) == 1);
    REQUIRE(slots[1].count(s) == 1);
    CHECK(slots[0][s] + slots[1][s] == kGlobalBatch);
    CHECK(hash[0][s] == hash[1][s]);
    uneven += slots[0][s] != slots[1][s];
    table += " " + std::to_string(slots[0][s]) + "/" + std::to_string(slots[1][s]);
  }
  MESSAGE("slots per step (peer 0/peer 1, peer 1 slowed):" << table);
  CHECK(uneven > 0);  // balancing really moved shares while the moments were sharded
  const auto ref = RunToEnd(tmp / "ref", 2, ZeroArgs(tmp / "data", kSteps, 0), base + 20);
  const double loss = c.Metrics(0).back().loss, ref_loss = ref[0].back().loss;
  CHECK(c.Metrics(0).back().step == kSteps);
  CHECK(std::fabs(loss - ref_loss) / std::fabs(ref_loss) <= 1e-4);
}

TEST_CASE("zero: kill -9 of a non-leader, then of the leader, each restarted -- pieces move") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  const auto args_for = [&](int64_t steps) { return ZeroArgs(tmp / "data", steps, 1); };
  FaultCluster c(tmp / "run", 3, args_for(kUntilStopped), base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 5 && c.LastStep(2) >= 5; }, 90),
                  c.Dump());
  for (const int victim : {2, 0}) {
    const int survivor = victim == 0 ? 1 : 0;
    Pause(c, 0.7);
    c.Poll();
    const uint64_t epoch = c.LastEpoch(survivor);
    const double t_kill = c.Kill9(victim);
    MESSAGE("kill -9 of peer " << victim << " at step " << c.LastStep(survivor));
    const FailureFigures f = WaitTrainingAgain(c, survivor, t_kill, epoch, 40);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    std::printf(
        "fault figure: --zero 1 kill -9 of peer %d -> training again = %.3f s, %lld "
        "step(s) lost\n",
        victim, f.to_training_s, static_cast<long long>(f.steps_lost));
    Pause(c, 1.0);
    const size_t before = c.MetricCount(victim);
    const double t_start = NowS();
    c.Start(victim);
    const double rejoin = WaitRejoined(c, victim, before, t_start, 60);
    REQUIRE_MESSAGE(rejoin >= 0, "peer " << victim << " did not rejoin\n" << c.Dump());
  }
  // The survivors moved their pieces to the new rings (and never started from zeros).
  const std::string logs = c.Logs(1);
  CHECK_MESSAGE(logs.find("optimizer pieces of ring position") != std::string::npos, c.Dump());
  CHECK(logs.find("is lost") == std::string::npos);
  Pause(c, 1.0);
  for (int i = 0; i < 3; ++i) c.Signal(i, SIGTERM);
  CheckFinal(c, {0, 1, 2}, -1, nullptr, 120);
  const int64_t last = c.Metrics(0).back().step;
  const Metric ref = ReferenceRun(tmp / "ref", 3, args_for(last), base + 20, 150);
  REQUIRE(ref.step == last);
  const double loss = c.Metrics(0).back().loss;
  const double rel = std::fabs(loss - ref.loss) / std::fabs(ref.loss);
  std::printf(
      "fault figure: --zero 1 final loss at step %lld: faulty run %.9g, uninterrupted "
      "%.9g (relative %.2g)\n",
      static_cast<long long>(last), loss, ref.loss, rel);
  CHECK(rel <= 1e-6);
}

TEST_CASE("zero: a --zero 1 checkpoint resumes on 4, 3 and 1 peers and with --zero 0") {
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  auto with_ckpt = [](std::vector<std::string> a) {
    a.push_back("--ckpt-every=10");
    a.push_back("--keep=0");
    return a;
  };
  // Written: 4 peers, 20 steps. Reference: 4 peers straight to 30.
  RunToEnd(tmp / "w", 4, with_ckpt(ZeroArgs(tmp / "data", 20, 1)), base);
  const std::string written = tmp / "w/p0/ckpt";  // the leader's copy
  REQUIRE(std::filesystem::exists(written + "/step-00000020/adam_m.bin"));
  REQUIRE(std::filesystem::exists(written + "/step-00000010/adam_v.bin"));
  const auto ref = RunToEnd(tmp / "ref", 4, ZeroArgs(tmp / "data", 30, 1), base + 10);
  const std::map<int64_t, std::string> ref_hash = HashByStep(ref[0]);
  const double ref_loss = ref[0].back().loss;

  // Only the resuming leader gets the checkpoint: the others receive params and pieces.
  auto resume_ring = [&](const std::string& name, int n, int zero, int port) {
    const std::string dir = tmp / name;
    std::filesystem::create_directories(dir + "/p0");
    std::filesystem::copy(written, dir + "/p0/ckpt", std::filesystem::copy_options::recursive);
    return RunToEnd(dir, n, ZeroArgs(tmp / "data", 30, zero), port);
  };
  {
    const auto same = resume_ring("r4", 4, 1, base + 20);
    CHECK(same[0].front().step >= 20);  // resumed, not started over
    for (int p = 0; p < 4; ++p) CHECK(same[p].back().hash == ref_hash.at(30));
    const auto dense = resume_ring("r4z0", 4, 0, base + 30);
    for (int p = 0; p < 4; ++p) CHECK(dense[p].back().hash == ref_hash.at(30));
    const auto three = resume_ring("r3", 3, 1, base + 40);
    for (int p = 1; p < 3; ++p) CHECK(three[p].back().hash == three[0].back().hash);
    CHECK(std::fabs(three[0].back().loss - ref_loss) / ref_loss <= 1e-4);
  }
  // One peer alone (no --hosts), and a corrupt moment section: step 20 is skipped.
  const std::string alone = tmp / "alone";
  std::filesystem::copy(written, alone, std::filesystem::copy_options::recursive);
  {
    std::fstream f(alone + "/step-00000020/adam_v.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  std::vector<std::string> args = TinyTrainArgs(tmp / "data", 30, kGlobalBatch);
  args.insert(args.begin(), "train");
  for (const char* a : {"--clip=0.05", "--ckpt-dir"}) args.push_back(a);
  args.push_back(alone);
  args.push_back("--metrics");
  args.push_back(tmp / "alone.jsonl");
  const rt::integration::RunResult r = RunRingtrain(args, tmp.path(), 120);
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.err.find("skipping invalid checkpoint") != std::string::npos);
  CHECK(r.err.find("adam_v.bin") != std::string::npos);
  CHECK(r.err.find("resumed from") != std::string::npos);
  CHECK(r.err.find("step-00000010") != std::string::npos);
  // It went on from step 10 to 30 and ends where the uninterrupted 4-peer run ended: N
  // peers equal one peer up to float summation order, as for the 3-peer ring above.
  int64_t first_step = -1, last_step = -1;
  double last_loss = NAN;
  std::ifstream metrics(tmp / "alone.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"loss\"") == std::string::npos ||
        line.find("\"val_loss\"") != std::string::npos) {
      continue;
    }
    const auto step = static_cast<int64_t>(rt::integration::JsonNumber(line, "step"));
    if (first_step < 0) first_step = step;
    last_step = step;
    last_loss = rt::integration::JsonNumber(line, "loss");
  }
  CHECK(first_step == 11);
  REQUIRE(last_step == 30);
  MESSAGE("--zero 1 checkpoint resumed alone: loss at step 30 "
          << last_loss << ", uninterrupted 4 peers " << ref_loss);
  CHECK(std::fabs(last_loss - ref_loss) / ref_loss <= 1e-4);
}

TEST_CASE(
    "zero: two ring neighbours killed at once -- the ring goes back to the newest checkpoint") {
  // 5 peers (quorum 3): positions 2 and 3 die together, so position 2's pieces lose both
  // their owner and their replica. The survivors find it when they move the pieces and
  // go back, all together, to the newest checkpoint a member holds (the leader's).
  TempDir tmp;
  WriteFaultData(tmp / "data");
  const int base = TestBasePort();
  const auto args_for = [&](int64_t steps) {
    std::vector<std::string> a = ZeroArgs(tmp / "data", steps, 1);
    a.push_back("--ckpt-every=4");
    return a;
  };
  FaultCluster c(tmp / "run", 5, args_for(kUntilStopped), base + 10);
  c.WriteHostsAll({0, 1, 2, 3, 4});
  for (int i = 0; i < 5; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 14; }, 120), c.Dump());
  c.Poll();
  const uint64_t epoch = c.LastEpoch(0);
  const double t_kill = c.Kill9Together({2, 3});
  const FailureFigures f = WaitTrainingAgain(c, 0, t_kill, epoch, 60);
  REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
  for (int i : {0, 1, 4}) {
    const std::string logs = c.Logs(i);
    CHECK_MESSAGE(logs.find("is lost") != std::string::npos, "peer " << i << "\n" << c.Dump());
    CHECK_MESSAGE(
        logs.find("goes back to the newest checkpoint a member holds: step") != std::string::npos,
        "peer " << i << "\n"
                << c.Dump());
  }
  std::printf(
      "fault figure: --zero 1 two neighbours kill -9 -> training again from a checkpoint "
      "= %.3f s, %lld step(s) redone\n",
      f.to_training_s, static_cast<long long>(f.steps_lost));
  // They come back, and the run ends as an uninterrupted one.
  for (int i : {2, 3}) {
    const size_t before = c.MetricCount(i);
    const double t_start = NowS();
    c.Start(i);
    REQUIRE_MESSAGE(WaitRejoined(c, i, before, t_start, 60) >= 0, "peer " << i
                                                                          << " did not rejoin\n"
                                                                          << c.Dump());
  }
  Pause(c, 1.0);
  for (int i = 0; i < 5; ++i) c.Signal(i, SIGTERM);
  CheckFinal(c, {0, 1, 2, 3, 4}, -1, nullptr, 120);
  const int64_t last = c.Metrics(0).back().step;
  const Metric ref = ReferenceRun(tmp / "ref", 5, args_for(last), base + 20, 150);
  REQUIRE(ref.step == last);
  const double rel = std::fabs(c.Metrics(0).back().loss - ref.loss) / std::fabs(ref.loss);
  std::printf(
      "fault figure: --zero 1 after going back to a checkpoint, final loss at step %lld: "
      "%.9g, uninterrupted %.9g (relative %.2g)\n",
      static_cast<long long>(last), c.Metrics(0).back().loss, ref.loss, rel);
  CHECK(rel <= 1e-6);
}
