// Round sync (--outer-overlap off) through the faults of the integration kill test,
// with the outer state sharded (--outer-shard on) and whole: an elastic ring of 3 real
// Trainers on loopback TcpNodes, each peer on its own thread. Peer 2 crashes one step
// into a round (its trainer is destroyed: its sockets close as after kill -9), the 2
// survivors finish the round (an outer step of 2, re-cutting the sharded pieces among
// themselves), and peer 2 comes back from nothing (admitted at the next outer step,
// receiving its pieces); then the same for the leader, peer 0. The faults fall at the
// same step counts in both runs (ScriptedReducer pauses the survivors where the view
// changes), so sharding, which never changes the math (DESIGN invariant 3), must give
// the same bits: the same param_hash at every outer step, on the same ring sizes.
// Without this, a restarted peer given wrong momentum pieces, or survivors with a stale
// round-start copy after the re-cut, would still agree among themselves (the owners'
// allgather makes every replica equal) and show only as a different loss.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collective/codec_spec.h"
#include "net/net_test_util.h"
#include "train/elastic_reducer.h"
#include "train/param_hash.h"
#include "train/ring_gradient_reducer.h"
#include "train/scripted_reducer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace rt::train {
namespace {

using testing::OuterHash;
using testing::Script;
using testing::ScriptedReducer;
using testing::StepGate;
using testing::TempDir;

#ifdef RINGTRAIN_SANITIZED
constexpr int kSlow = 5;
#else
constexpr int kSlow = 1;
#endif

constexpr int kEvery = 8;  // H
constexpr int kSteps = 64;
// Peer 2 crashes after step 25 (one step into the round 24-32) and is restarted during
// step 28's boundary (admitted at the outer step 32); peer 0 the same a round later.
constexpr int64_t kCrash2 = 25, kRestart2 = 28, kCrash0 = 41, kRestart0 = 44;

TrainConfig RejoinConfig(const std::string& data, bool shard) {
  TrainConfig c = testing::TinyConfig(data);
  c.min_lr = c.lr;  // constant: a restarted peer's schedule is the ring's
  c.batch = 2;
  c.global_batch = 12;
  c.steps = kSteps;
  c.round.every = kEvery;
  c.round.codec = *collective::ParseCodecSpec("none");
  c.round.overlap = false;
  c.round.shard = shard;
  return c;
}

std::unique_ptr<Trainer> MakePeer(const std::vector<net::HostEntry>& hosts, int rank,
                                  const TrainConfig& config, Script script,
                                  std::vector<OuterHash>* hashes) {
  net::TcpNodeOptions no;
  no.hosts = hosts;
  no.self_rank = rank;
  no.secret = "round-shard-rejoin-secret-0123";
  no.fingerprint = {{"model", "tiny"}};
  no.handshake_timeout = absl::Seconds(5);
  no.socket_buffer_bytes = 0;
  auto node = net::TcpNode::Start(no);
  REQUIRE_MESSAGE(node.ok(), node.status().ToString());
  ElasticOptions e;
  e.node = *node;
  // Generous (a crash closes sockets, seen at once): on a loaded machine a view proposal
  // (answered within half of it) must not leave a slow peer out of the first view.
  e.peer_timeout_ms = 4000 * kSlow;
  e.startup_grace_ms = 10000 * kSlow;
  e.wait = absl::Seconds(60);
  e.watch_signals = false;
  e.ckpt_shared = true;
  e.make_reducer =
      [carried = std::make_shared<CarriedCommState>()](
          std::unique_ptr<net::TcpRing> ring,
          const cluster::View& view) -> absl::StatusOr<std::unique_ptr<GradientReducer>> {
    RingReducerOptions o;
    o.carried = carried;
    o.check_every = 1;
    o.buckets.bucket_bytes = 6000;  // several buckets, so several pieces per peer
    o.comm.probe_every = -1;        // the ring order stays the hosts file's
    o.comm.channel_salt = cluster::RingChannel(view);
    return std::unique_ptr<GradientReducer>(
        std::make_unique<RingGradientReducer>(std::move(ring), std::move(o)));
  };
  auto elastic = ElasticReducer::Create(std::move(e));
  REQUIRE_MESSAGE(elastic.ok(), elastic.status().ToString());
  auto trainer = Trainer::Create(
      config, std::make_unique<ScriptedReducer>(*std::move(elastic), std::move(script), hashes));
  REQUIRE_MESSAGE(trainer.ok(), trainer.status().ToString());
  return *std::move(trainer);
}

struct RunResult {
  std::vector<OuterHash> survivor;  // peer 1's outer steps (it never leaves)
  std::vector<uint64_t> final_hashes;
};

// One run of the fault schedule; `shard`: --outer-shard on.
RunResult RunSchedule(const std::string& data, bool shard) {
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(3);
  const TrainConfig config = RejoinConfig(data, shard);
  StepGate gate;
  const std::vector<int64_t> all_pauses = {kCrash2, kRestart2, kCrash0, kRestart0};
  std::vector<std::vector<OuterHash>> hashes(3);
  std::vector<std::vector<OuterHash>> restarted_hashes(3);
  std::vector<std::unique_ptr<Trainer>> peers(3);
  std::vector<absl::Status> results(3);
  std::vector<int64_t> first_completed(3, -1);  // of the restarted peers
  const auto script_of = [&](int r, bool restarted) {
    Script s;
    s.gate = &gate;
    if (r == 0 && !restarted) s.crash_after = kCrash0;
    if (r == 2 && !restarted) s.crash_after = kCrash2;
    // The survivors of each crash wait where it happens and where the victim restarts.
    if (r != 2) s.pauses = {kCrash2, kRestart2};
    if (r != 0) s.pauses.insert(s.pauses.end(), {kCrash0, kRestart0});
    s.then_wait_departure = {kCrash2, kCrash0};
    if (restarted) s.first_completed = &first_completed[r];
    return s;
  };
  for (int r = 0; r < 3; ++r)
    peers[r] = MakePeer(hosts, r, config, script_of(r, false), &hashes[r]);
  std::vector<std::thread> threads(3);
  std::vector<int> crashed(3, 0);  // not vector<bool>: each thread writes its own
  const auto run = [&](int r) {
    threads[r] = std::thread([&, r] {
      results[r] = peers[r]->Run();
      if (absl::IsInternal(results[r]) && !crashed[r]) {
        crashed[r] = 1;
        peers[r].reset();  // its sockets close mid-run, as after kill -9
      }
    });
  };
  for (int r = 0; r < 3; ++r) run(r);
  const auto fail = [&](const std::string& what) {
    gate.ReleaseAll(all_pauses);
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
    FAIL(what);
  };
  for (const auto& [victim, crash, restart] :
       {std::tuple<int, int64_t, int64_t>{2, kCrash2, kRestart2}, {0, kCrash0, kRestart0}}) {
    threads[victim].join();
    if (!crashed[victim])
      fail("peer " + std::to_string(victim) + " did not crash: " + results[victim].ToString());
    if (!gate.WaitArrived(crash, 2, absl::Seconds(60 * kSlow))) fail("survivors did not pause");
    gate.Release(crash);
    if (!gate.WaitArrived(restart, 2, absl::Seconds(60 * kSlow))) fail("survivors did not pause");
    peers[victim] =
        MakePeer(hosts, victim, config, script_of(victim, true), &restarted_hashes[victim]);
    run(victim);
    // Its join reaches the membership while the survivors wait: admitted at the next
    // outer step.
    absl::SleepFor(absl::Seconds(5 * kSlow));
    gate.Release(restart);
  }
  for (std::thread& t : threads) t.join();
  // Admitted at the outer step after the restart (a join that reached the membership
  // late, on a very loaded machine, comes in mid-round and sits out: another schedule).
  REQUIRE_MESSAGE(first_completed[2] == (kRestart2 / kEvery + 1) * kEvery + 1,
                  "peer 2 came back late, at step ", first_completed[2]);
  REQUIRE_MESSAGE(first_completed[0] == (kRestart0 / kEvery + 1) * kEvery + 1,
                  "peer 0 came back late, at step ", first_completed[0]);
  RunResult out;
  for (int r = 0; r < 3; ++r) {
    CHECK_MESSAGE(results[r].ok(), "peer ", r, ": ", results[r].ToString());
    REQUIRE(peers[r] != nullptr);
    CHECK(peers[r]->step() == kSteps);
    out.final_hashes.push_back(ParamHash(peers[r]->params()));
  }
  out.survivor = hashes[1];
  for (int r : {0, 2}) {
    // The restarted peers' outer steps agree with the survivor's.
    for (const OuterHash& h : restarted_hashes[r]) {
      bool found = false;
      for (const OuterHash& s : out.survivor) found = found || (s == h);
      CHECK_MESSAGE(found, "restarted peer ", r, " at step ", h.step, " differs from peer 1");
    }
    CHECK(!restarted_hashes[r].empty());
  }
  return out;
}

}  // namespace

TEST_CASE(
    "--outer-shard on: crash and restart of a peer, then of the leader, in inner steps -- the "
    "unsharded bits at every outer step") {
  testing::UseOneThread();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 20000, 2000).empty());
  const RunResult whole = RunSchedule(tmp / "data", false);
  const RunResult sharded = RunSchedule(tmp / "data", true);
  // The same schedule: outer steps at the same counts on the same ring sizes (3, then 2
  // in the rounds of the crashes, 3 again after each restart).
  REQUIRE(whole.survivor.size() == sharded.survivor.size());
  std::vector<int> ring_sizes;
  for (size_t i = 0; i < whole.survivor.size(); ++i) {
    INFO("outer step at ", whole.survivor[i].step, " on ", whole.survivor[i].peers, " peers");
    REQUIRE(whole.survivor[i].step == sharded.survivor[i].step);
    REQUIRE(whole.survivor[i].peers == sharded.survivor[i].peers);
    CHECK(whole.survivor[i].hash == sharded.survivor[i].hash);
    ring_sizes.push_back(whole.survivor[i].peers);
  }
  CHECK(ring_sizes == std::vector<int>{3, 3, 3, 2, 3, 2, 3, 3});
  // One hash on every peer at the end, the same in both runs.
  for (const RunResult* r : {&whole, &sharded}) {
    for (uint64_t h : r->final_hashes) CHECK(h == whole.final_hashes[0]);
  }
}

}  // namespace rt::train
