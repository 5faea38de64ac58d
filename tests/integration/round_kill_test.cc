// Process faults under round sync (`train --hosts --outer-every H`), as the --zero 1 kill
// tests do them: 3 loopback peers of a tiny model; kill -9 of a non-leader, then of the
// leader, each restarted, once in each phase of a round:
//   - during inner steps (the victim is killed a few steps into a round, several steps
//     before its exchange): the survivors do the round's outer step without it;
//   - during the outer exchange (the victim holds inside the exchange by the test-only
//     RINGTRAIN_TEST_HOLD_EXCHANGE of train/exchange_hold.h, every other peer waiting
//     for its contribution, and is killed there): the survivors redo the exchange
//     among themselves without recomputing their inner steps (compute_ms 0).
// A third case repeats the kills during inner steps with the outer state sharded
// (--outer-shard on, so --outer-overlap off): the survivors re-cut the pieces of the
// round-start copy and the momentum among themselves (from owners and replicas), the
// restarted peer receives its pieces when it rejoins, and the end compares as above.
// The first two run with --outer-overlap on (the default): the exchange the victim holds in runs
// beside the next round, so the others wait for its sum at that round's end, and that
// is the outer step they redo; the restarted peer joins with the pending round (its
// exchange redone with it, weight 0).
// A restarted peer starts from the shared parameters of a round's start (it received
// the state at an outer step, or sits the round out: its log says so), and at every
// outer step all peers that report it hold one param_hash. The run ends with a ring
// SIGTERM at a round's end, every peer at one step and hash, and a final loss within
// kLossTolerance of an uninterrupted run to the
// same step: the val loss of each run's final checkpoint (`ringtrain eval`) on 16,000
// held-out tokens of the training distribution, the same windows for both.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "fault_harness.h"

namespace {

using namespace rt::integration::fault;  // NOLINT: test-local harness
using rt::integration::TempDir;
using rt::integration::TestBasePort;

constexpr int kGlobalBatch = 24;   // 12 micro-batches of --batch 2, shared by 2 or 3 peers
constexpr int kEvery = 8;          // H: inner steps per round
constexpr int kCompareFrom = 600;  // the earliest step at which the final loss is compared
// How far the faulty run's final val loss may be from the uninterrupted one's. Both
// runs see the same windows, but their trajectories differ (the faults; --balance's
// shares follow each run's timing, so even two uninterrupted runs differ), and so do
// their final parameters. Measured on a loaded machine (docs/benchmarks/round-faults.md):
// without overlap (the sharded case) the gap stayed within 0.45% in 12 runs, but a
// CI-like run on a quiet machine (which trains further before the test's SIGTERM: to
// step 896 instead of ~670) ended 1.17% apart, the faulty run *below*; with overlap
// (one round late, --outer-compress int8 in the exchange case) two uninterrupted runs
// alone differed by up to 1.3% and faulty runs by up to 1.6%. So this comparison tells
// a broken run (e.g. 16% for a round whose outer step scaled the parameters down) from
// noise at 2%, no finer, with or without overlap; the feature's 1% is not something
// this tiny model's runs can show. The mean train loss of the
// last rounds, compared before, gave 2.1% on a run whose val losses agreed within 0.3%
// (and 27% on one within 0.1%): every peer's inner-step loss counted alike whatever its
// share (a peer --balance gives one sequence, or none, reported that one's loss, or 0).
constexpr double kLossTolerance = 0.02;

// `overlap`: --outer-overlap on (the default); `shard`: --outer-shard on, which takes
// --outer-overlap off.
std::vector<std::string> RoundArgs(const std::string& data, int64_t steps, const std::string& codec,
                                   bool overlap = true, bool shard = false) {
  std::vector<std::string> a = TinyTrainArgs(data, static_cast<int>(steps), kGlobalBatch);
  a.push_back("--outer-every=" + std::to_string(kEvery));
  a.push_back("--outer-compress=" + codec);
  // Explicit: the exchange checks depend on it.
  a.push_back(overlap ? "--outer-overlap=on" : "--outer-overlap=off");
  if (shard) a.push_back("--outer-shard=on");
  a.push_back("--bucket-mb=0.02");  // a few buckets per exchange
  a.push_back("--probe-every=-1");  // the ring order stays the hosts file's
  return a;
}

// The fault tests' pattern with a third of the tokens drawn at random: its loss floor
// (~1.9 nats) is like text's, far above 0, so a relative gap compares how much was
// learned; on the pure pattern the loss tends to 0 and any relative gap grows without
// bound.
void WriteNoisyData(const std::string& dir) {
  const size_t train_n = 20000, val_n = 16000;
  std::vector<uint32_t> train(train_n), val(val_n);
  uint64_t x = 88172645463325252ull;  // xorshift64: the same data on every run
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (size_t i = 0; i < train_n; ++i) {
    train[i] = next() % 3 == 0 ? static_cast<uint32_t>(next() % 50)
                               : static_cast<uint32_t>((i * 7 + i / 13) % 50);
  }
  // The val split continues the same stream: held-out tokens of the training
  // distribution, on which the final parameters are evaluated (EvalFinal).
  for (size_t i = 0; i < val_n; ++i) {
    val[i] = next() % 3 == 0 ? static_cast<uint32_t>(next() % 50)
                             : static_cast<uint32_t>((i * 7 + i / 13) % 50);
  }
  REQUIRE(rt::data::WriteTokenDataset(dir, 50, train, val, train_n * 3, val_n * 3).ok());
}

bool OuterStep(int64_t step) { return step > 0 && step % kEvery == 0; }

// `ringtrain eval` of the final checkpoint (step `last`, on the leader and its
// successor) of cluster `c`: the val loss of the shared parameters on every window of
// the held-out split.
double EvalFinal(const FaultCluster& c, int64_t last, const std::string& data,
                 const std::string& scratch) {
  for (int i = 0; i < c.size(); ++i) {
    std::vector<std::string> problems;
    auto ck = rt::ckpt::OpenLatestValidCheckpoint(c.CkptDir(i), &problems);
    if (!ck.ok() || ck->meta().step != last) continue;
    const rt::integration::RunResult r = rt::integration::RunRingtrain(
        {"eval", "--ckpt", c.CkptDir(i), "--data", data, "--threads=1"}, scratch, 60);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    return rt::integration::JsonNumber(r.out.substr(r.out.rfind("{\"step\"")), "val_loss");
  }
  FAIL("no peer holds a checkpoint of step " << last << "\n" << c.Dump());
  return 0;
}

// An uninterrupted run of `n` peers to the end: EvalFinal of it.
double UninterruptedLoss(const std::string& dir, int n, const std::vector<std::string>& args,
                         const std::string& data, int port) {
  FaultCluster c(dir, n, args, port);
  std::vector<int> all;
  for (int i = 0; i < n; ++i) all.push_back(i);
  c.WriteHostsAll(all);
  for (int i = 0; i < n; ++i) c.Start(i);
  std::vector<Metric> last;
  for (int i = 0; i < n; ++i) {
    std::optional<int> code = c.WaitExit(i, 120);
    REQUIRE_MESSAGE(code.has_value(), "uninterrupted peer " << i << " did not finish\n"
                                                            << c.Dump());
    REQUIRE_MESSAGE(*code == 0, "uninterrupted peer " << i << " exit " << *code << "\n"
                                                      << c.Dump());
  }
  c.Poll();
  for (int i = 0; i < n; ++i) {
    REQUIRE(c.MetricCount(i) > 0);
    last.push_back(c.Metrics(i).back());
    CHECK(last.back().hash == last.front().hash);
  }
  return EvalFinal(c, last.front().step, data, dir);
}

// After a restart of `who` at t_start: waits for its first outer step in a newer epoch
// than its last line before, and checks that every other peer reporting that (epoch,
// step) holds its hash; and that it started from a round's shared parameters: it
// received the state of an outer step, or (received in the middle of a round, by a
// view change that came late) its log says it sat the rest of that round out.
double WaitRejoinedAtOuterStep(FaultCluster& c, int who, size_t before, double t_start) {
  const uint64_t old_epoch = before > 0 ? c.Metrics(who)[before - 1].epoch : 0;
  Metric first;
  const bool found = c.WaitUntil(
      [&] {
        for (size_t k = before; k < c.MetricCount(who); ++k) {
          const Metric& m = c.Metrics(who)[k];
          if (m.epoch > old_epoch && OuterStep(m.step)) {
            first = m;
            return true;
          }
        }
        return false;
      },
      60);
  if (!found) return -1;
  CheckOthersHoldHash(c, who, first);
  // The state it received, from its newest incarnation's log.
  const std::string logs = c.Logs(who);
  static const std::regex received(R"(state transfer: received step (\d+) )");
  int64_t received_step = -1;
  size_t received_at = 0;
  for (std::sregex_iterator it(logs.begin(), logs.end(), received), end; it != end; ++it) {
    received_step = std::stoll((*it)[1].str());
    received_at = static_cast<size_t>(it->position());
  }
  CHECK_MESSAGE(received_step >= 0, "peer " << who << " received no state\n" << c.Dump());
  const bool sat_out =
      logs.find("received a replica in the middle of a round", received_at) != std::string::npos;
  MESSAGE("peer " << who << " rejoined: received the state of step " << received_step
                  << std::string(sat_out ? " and sat the rest of that round out" : ""));
  CHECK_MESSAGE((received_step % kEvery == 0 || sat_out),
                "peer " << who << " received step " << received_step
                        << " mid-round and trained on from that replica");
  return first.seen_s - t_start;
}

// The end: SIGTERM to every peer; all exit 0 at one step (a round's end) with one hash;
// at every outer step all peers that report it agree; then an uninterrupted run to the
// same step, whose final val loss (EvalFinal) the faulty run's must match within kLossTolerance.
void StopAndCompare(FaultCluster& c, const std::string& ref_dir, const std::string& data,
                    const std::string& codec, int port, bool overlap = true, bool shard = false) {
  // Compared where the curve has flattened: a fast machine reaches the stop with
  // ~900 steps, a loaded one with under 200, where the loss still falls ~1% per few
  // rounds and the rounds a fault cost (a victim's lost inner steps, a rejoiner
  // sitting out) alone gave gaps of 1.1-1.5% (4 runs in ~90).
  REQUIRE_MESSAGE(c.WaitUntil(
                      [&] {
                        for (int i = 0; i < c.size(); ++i) {
                          if (c.LastStep(i) < kCompareFrom) return false;
                        }
                        return true;
                      },
                      60),
                  "the ring did not reach step " << kCompareFrom << "\n"
                                                 << c.Dump());
  for (int i = 0; i < c.size(); ++i) c.Signal(i, SIGTERM);
  for (int i = 0; i < c.size(); ++i) {
    std::optional<int> code = c.WaitExit(i, 60);
    REQUIRE_MESSAGE(code.has_value(), "peer " << i << " did not stop\n" << c.Dump());
    CHECK_MESSAGE(*code == 0, "peer " << i << " exit " << *code << "\n" << c.Dump());
  }
  c.Poll();
  std::vector<Metric> last;
  for (int i = 0; i < c.size(); ++i) {
    REQUIRE(c.MetricCount(i) > 0);
    last.push_back(c.Metrics(i).back());
  }
  const int64_t steps = last[0].step;
  CHECK(steps % kEvery == 0);
  for (const Metric& m : last) {
    CHECK_MESSAGE(m.step == steps, m.line);
    CHECK_MESSAGE(m.hash == last[0].hash, m.line);
  }
  std::map<std::pair<uint64_t, int64_t>, std::pair<int, std::string>> seen;
  int compared = 0;
  for (int i = 0; i < c.size(); ++i) {
    for (const Metric& m : c.Metrics(i)) {
      if (!OuterStep(m.step)) continue;  // between outer steps replicas differ by design
      auto [it, fresh] = seen.emplace(std::make_pair(m.epoch, m.step), std::make_pair(i, m.hash));
      if (fresh) continue;
      ++compared;
      CHECK_MESSAGE(it->second.second == m.hash, "epoch " << m.epoch << " step " << m.step
                                                          << ": peer " << it->second.first
                                                          << " and peer " << i << " differ");
    }
  }
  CHECK(compared > 0);
  const double ref = UninterruptedLoss(ref_dir, c.size(),
                                       RoundArgs(data, steps, codec, overlap, shard), data, port);
  const double val = EvalFinal(c, steps, data, ref_dir);
  const double rel = std::fabs(val - ref) / ref;
  std::printf(
      "fault figure: round sync (%s%s%s) final val loss at step %lld: faulty run %.6f, "
      "uninterrupted %.6f (relative %.2g)\n",
      codec.c_str(), overlap ? ", overlap" : "", shard ? ", sharded" : "",
      static_cast<long long>(steps), val, ref, rel);
  CHECK(rel <= kLossTolerance);
}

// A restarted peer's start, rejoin and the checks of WaitRejoinedAtOuterStep.
void Restart(FaultCluster& c, int victim) {
  const size_t before = c.MetricCount(victim);
  const double t_start = NowS();
  c.Start(victim);
  const double rejoin = WaitRejoinedAtOuterStep(c, victim, before, t_start);
  REQUIRE_MESSAGE(rejoin >= 0, "peer " << victim << " did not rejoin\n" << c.Dump());
  std::printf(
      "fault figure: round sync restart of peer %d -> first outer step with the ring "
      "= %.3f s\n",
      victim, rejoin);
}

// Kills during inner steps (the first case), with the outer state whole or sharded;
// `overlap` and `shard` as in RoundArgs (overlap off without sharding was run to
// measure the spread: docs/benchmarks/round-faults.md).
void KillDuringInnerSteps(bool overlap, bool shard) {
  TempDir tmp;
  WriteNoisyData(tmp / "data");
  const int base = TestBasePort();
  const std::string codec = "none";
  FaultCluster c(tmp / "run", 3, RoundArgs(tmp / "data", kUntilStopped, codec, overlap, shard),
                 base + 10);
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 2 * kEvery; }, 90), c.Dump());
  for (const int victim : {2, 0}) {
    const int survivor = victim == 0 ? 1 : 0;
    // A moment a step or two into a round: the victim is several inner steps away from
    // its next exchange.
    REQUIRE_MESSAGE(c.WaitUntil(
                        [&] {
                          const int64_t s = c.LastStep(victim) % kEvery;
                          return s >= 1 && s <= 2;
                        },
                        30),
                    c.Dump());
    const uint64_t epoch = c.LastEpoch(survivor);
    const int64_t at = c.LastStep(victim);
    const double t_kill = c.Kill9(victim);
    MESSAGE("kill -9 of peer " << victim << " after inner step " << at);
    const FailureFigures f = WaitTrainingAgain(c, survivor, t_kill, epoch, 40);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    std::printf(
        "fault figure: round sync%s kill -9 of peer %d in inner steps -> training again = "
        "%.3f s\n",
        shard ? " (sharded outer state)" : "", victim, f.to_training_s);
    // The round the victim died in has an outer step of the 2 survivors: with overlap
    // it is applied at the next round's end (its exchange launched, or redone, among
    // the 2). The survivors may be most of a round ahead of the victim's last line (an
    // exchange runs beside the next round), so the end of the victim's own round can
    // still apply the previous round's exchange, done with the victim. Which round the
    // victim died in comes from its metrics read after the kill: on a loaded machine it
    // can run several steps (even past an outer step) between the line the wait above
    // read and the signal. Its last line may be one step behind (killed between a step
    // and its line): if that leaves it one step before an outer step, the outer step
    // of 2 may be the next one.
    const int64_t died_after = std::max(at, c.LastStep(victim));
    // Without overlap the outer step of 2 is the one that ends that round.
    const int64_t applied_at = (died_after / kEvery + (overlap ? 2 : 1)) * kEvery;
    const int64_t latest = died_after % kEvery == kEvery - 1 ? applied_at + kEvery : applied_at;
    REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(survivor) >= latest; }, 30), c.Dump());
    bool without_victim = false;
    for (const Metric& m : c.Metrics(survivor)) {
      if (m.step % kEvery == 0 && m.step >= applied_at && m.step <= latest && m.peers == 2) {
        without_victim = true;
      }
    }
    CHECK_MESSAGE(without_victim, "no outer step of 2 peers at step "
                                      << applied_at << (latest != applied_at ? " or the next" : "")
                                      << " (the victim's last step: " << died_after << ")\n"
                                      << c.Dump());
    Pause(c, 0.5);
    Restart(c, victim);
    if (shard) {
      // The restarted peer held no outer state: its pieces of the ring of 3 came from
      // the survivors (its log's last line about them).
      const std::string logs = c.Logs(victim);
      static const std::regex pieces(
          R"(outer state pieces of ring position \d+ of (\d+): .*; ([0-9.]+) MB received)");
      std::string ring_size, received;
      for (std::sregex_iterator it(logs.begin(), logs.end(), pieces), end; it != end; ++it) {
        ring_size = (*it)[1].str();
        received = (*it)[2].str();
      }
      CHECK_MESSAGE(ring_size == "3", c.Dump());
      CHECK_MESSAGE((!received.empty() && std::stod(received) > 0), c.Dump());
    }
  }
  Pause(c, 0.5);
  StopAndCompare(c, tmp / "ref", tmp / "data", codec, base + 20, overlap, shard);
}

}  // namespace

TEST_CASE("round sync: kill -9 of a peer, then of the leader, during inner steps") {
  KillDuringInnerSteps(/*overlap=*/true, /*shard=*/false);
}

TEST_CASE(
    "round sync, outer state sharded: kill -9 of a peer, then of the leader, in inner steps") {
  KillDuringInnerSteps(/*overlap=*/false, /*shard=*/true);
}

TEST_CASE("round sync: kill -9 of a peer, then of the leader, inside the outer exchange") {
  TempDir tmp;
  WriteNoisyData(tmp / "data");
  const int base = TestBasePort();
  const std::string codec = "int8";  // error feedback carried across the view changes
  const std::string run = tmp / "run";
  const auto hold_path = [&](int i) { return run + "/p" + std::to_string(i) + "/hold"; };
  std::vector<std::string> env;
  FaultCluster c(run, FaultCluster::LoopbackEndpoints(3, base + 10),
                 RoundArgs(tmp / "data", kUntilStopped, codec), [&](int i) {
                   return std::vector<std::string>{"/usr/bin/env",
                                                   "RINGTRAIN_TEST_HOLD_EXCHANGE=" + hold_path(i)};
                 });
  c.WriteHostsAll({0, 1, 2});
  for (int i = 0; i < 3; ++i) c.Start(i);
  REQUIRE_MESSAGE(c.WaitUntil([&] { return c.LastStep(0) >= 2 * kEvery; }, 90), c.Dump());
  for (const int victim : {1, 0}) {
    const int survivor = victim == 0 ? 1 : 0;
    // Arm the hold: the victim's next exchange waits, and with it every other peer.
    rt::testing::WriteFile(hold_path(victim), "hold\n");
    const std::string held = hold_path(victim) + ".held";
    REQUIRE_MESSAGE(c.WaitUntil([&] { return std::filesystem::exists(held); }, 30), c.Dump());
    const std::string held_text = rt::testing::ReadFile(held);
    const int64_t held_step = std::stoll(held_text) + 1;  // 1-based
    REQUIRE(OuterStep(held_step));
    // With overlap (the default) the victim held while launching its round's exchange:
    // the others go on with the next round and wait for the sum at its end. Otherwise
    // (a drained round, or a redo) they wait at this round's end.
    const bool beside = held_text.find("beside") != std::string::npos;
    const int64_t waiting_at = beside ? held_step + kEvery - 1 : held_step - 1;
    const int64_t outer_step = waiting_at + 1;  // the outer step the survivors redo
    MESSAGE("peer " << victim << " holds in the exchange of step " << held_step
                    << std::string(beside ? ", beside the next round" : ""));
    REQUIRE_MESSAGE(c.WaitUntil(
                        [&] {
                          for (int i = 0; i < 3; ++i) {
                            if (i != victim && c.LastStep(i) != waiting_at) return false;
                          }
                          return true;
                        },
                        30),
                    c.Dump());
    Pause(c, 0.3);  // the others are inside the exchange, waiting for the victim's part
    for (int i = 0; i < 3; ++i) CHECK(c.LastStep(i) == (i == victim ? held_step - 1 : waiting_at));
    const uint64_t epoch = c.LastEpoch(survivor);
    const double t_kill = c.Kill9(victim);
    std::filesystem::remove(hold_path(victim));  // its restart must not hold
    MESSAGE("kill -9 of peer " << victim << " inside the exchange of step " << held_step);
    const FailureFigures f = WaitTrainingAgain(c, survivor, t_kill, epoch, 40);
    REQUIRE_MESSAGE(f.to_training_s >= 0, "survivors did not train again\n" << c.Dump());
    std::printf(
        "fault figure: round sync kill -9 of peer %d in the exchange -> training again = "
        "%.3f s\n",
        victim, f.to_training_s);
    // The survivors redid that exchange between the two of them, from the inner steps
    // they had already applied (no compute in that step).
    const Metric* redone = nullptr;
    for (const Metric& m : c.Metrics(survivor)) {
      if (m.step == outer_step && m.epoch > epoch) redone = &m;
    }
    REQUIRE_MESSAGE(redone != nullptr, "no outer step " << outer_step << " after the kill\n"
                                                        << c.Dump());
    CHECK(redone->peers == 2);
    CHECK(rt::integration::JsonNumber(redone->line, "compute_ms") == 0);
    CHECK(rt::integration::JsonNumber(redone->line, "outer_bytes") > 0);
    Pause(c, 0.5);
    Restart(c, victim);
  }
  Pause(c, 0.5);
  StopAndCompare(c, tmp / "ref", tmp / "data", codec, base + 20);
}
