// ElasticReducer in one process: real Trainers on loopback TcpNodes (membership,
// views, state transfer, abort, stop votes), each peer on its own thread.
//   - a peer that goes away mid-run (its sockets close, as after kill -9) is dropped,
//     the others carry on; the same peer restarted from nothing rejoins, receives
//     the state and every replica ends bit-identical, close to one peer alone;
//   - a stop request stops every peer after the same step, the leader checkpoints;
//   - a peer without quorum gives up after `wait`, naming why;
//   - a joiner asked to stop while it receives the state leaves at once;
//   - a ring formation given up leaves no thread behind: the node goes with the peer.
#include "train/elastic_reducer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cluster/membership_service.h"
#include "core/clock.h"
#include "net/net_test_util.h"
#include "observe/status_board.h"
#include "train/ring_gradient_reducer.h"
#include "train/stop_signals.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace rt::train {
namespace {

using testing::TempDir;

#ifdef RINGTRAIN_SANITIZED
constexpr int kSlow = 5;
#else
constexpr int kSlow = 1;
#endif

net::TcpNodeOptions NodeOptions(const std::vector<net::HostEntry>& hosts, int rank) {
  net::TcpNodeOptions o;
  o.hosts = hosts;
  o.self_rank = rank;
  o.secret = "elastic-test-secret-0123";
  o.fingerprint = {{"model", "tiny"}};
  o.handshake_timeout = absl::Seconds(5);
  o.socket_buffer_bytes = 0;
  return o;
}

// One peer: node + elastic reducer + trainer (created on the calling thread).
std::unique_ptr<Trainer> MakePeer(const std::vector<net::HostEntry>& hosts, int rank,
                                  const TrainConfig& config, bool watch_signals,
                                  bool ckpt_shared = true, absl::Duration wait = absl::Seconds(60),
                                  const std::function<void(ElasticOptions&)>& tweak = nullptr,
                                  std::shared_ptr<observe::StatusBoard> board = nullptr) {
  auto node = net::TcpNode::Start(NodeOptions(hosts, rank));
  REQUIRE_MESSAGE(node.ok(), node.status().ToString());
  ElasticOptions e;
  e.node = *node;
  e.peer_timeout_ms = 1000 * kSlow;
  e.startup_grace_ms = 3000 * kSlow;
  e.wait = wait;
  e.watch_signals = watch_signals;
  e.ckpt_shared = ckpt_shared;
  // One CarriedCommState per process, shared by the reducers of its views, as
  // `train` does (residuals, calibration, the last link matrix: a rejoin's probe
  // reuses the links of the peers that stayed).
  e.make_reducer =
      [carried = std::make_shared<CarriedCommState>()](
          std::unique_ptr<net::TcpRing> ring,
          const cluster::View& view) -> absl::StatusOr<std::unique_ptr<GradientReducer>> {
    RingReducerOptions o;
    o.carried = carried;
    o.check_every = 1;
    o.comm.channel_salt = cluster::RingChannel(view);
    return std::unique_ptr<GradientReducer>(
        std::make_unique<RingGradientReducer>(std::move(ring), std::move(o)));
  };
  if (tweak) tweak(e);
  auto reducer = ElasticReducer::Create(std::move(e));
  REQUIRE_MESSAGE(reducer.ok(), reducer.status().ToString());
  auto trainer = Trainer::Create(config, *std::move(reducer), std::move(board));
  REQUIRE_MESSAGE(trainer.ok(), trainer.status().ToString());
  return *std::move(trainer);
}

// A constant learning rate, so a peer's schedule does not depend on --steps, and a
// global batch of 12 sequences shared by however many peers train.
TrainConfig ElasticConfig(const std::string& data, int steps) {
  TrainConfig c = testing::TinyConfig(data);
  c.min_lr = c.lr;
  c.global_batch = 12;
  c.steps = steps;
  return c;
}

// The steps a trainer running on another thread has completed, as its status board last
// heard (under the board's lock). Trainer::step() is the training thread's own counter,
// written there without synchronisation: reading it while Run() goes on is a data race.
int64_t StepsDone(observe::StatusBoard& board) {
  const observe::StatusSnapshot s = board.Snapshot();
  const observe::PeerRow* self = s.Self();
  return self != nullptr ? self->figures.step : -1;
}

}  // namespace

TEST_CASE("elastic: a peer that goes away is dropped, restarted it rejoins -- replicas end equal") {
  testing::UseOneThread();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 20000, 2000).empty());
  const int steps = 300;
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(3);

  std::vector<std::unique_ptr<Trainer>> peers(3);
  std::vector<absl::Status> results(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    // Rank 2 stops after 25 steps and is destroyed at once: its sockets close mid-run
    // for the others, as if it had been killed.
    peers[r] = MakePeer(hosts, r, ElasticConfig(tmp / "data", r == 2 ? 25 : steps), false);
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      results[r] = peers[r]->Run();
      if (r == 2) peers[r].reset();
    });
  }
  threads[2].join();
  CHECK_MESSAGE(results[2].ok(), results[2].ToString());
  // The same peer again, from nothing: admitted at a step boundary, it fetches the state.
  std::unique_ptr<Trainer> rejoined = MakePeer(hosts, 2, ElasticConfig(tmp / "data", steps), false);
  CHECK(rejoined->step() == 0);
  std::thread again([&] { results[2] = rejoined->Run(); });
  threads[0].join();
  threads[1].join();
  again.join();
  for (int r = 0; r < 3; ++r) CHECK_MESSAGE(results[r].ok(), "rank ", r, ": ", results[r]);
  REQUIRE(peers[0]->step() == steps);
  REQUIRE(peers[1]->step() == steps);
  REQUIRE(rejoined->step() == steps);
  // Bit-identical replicas (DESIGN invariant 2) ...
  const auto p0 = peers[0]->params(), p1 = peers[1]->params(), p2 = rejoined->params();
  CHECK(std::equal(p0.begin(), p0.end(), p1.begin()));
  CHECK(std::equal(p0.begin(), p0.end(), p2.begin()));

  // ... on the curve of one peer with the same global batch (12 = batch 4 x accum 3):
  // only float summation orders differ.
  TrainConfig single = ElasticConfig(tmp / "data", steps);
  single.global_batch = 0;
  single.accum = 3;
  auto alone = Trainer::Create(single);
  REQUIRE(alone.ok());
  REQUIRE((*alone)->Run().ok());
  const auto a = (*alone)->params();
  double max_abs = 0, max_weight = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i]) - p0[i]));
    max_weight = std::max(max_weight, std::fabs(static_cast<double>(a[i])));
  }
  MESSAGE("elastic run (3 -> 2 -> 3 peers) vs one peer after ", steps,
          " steps: max |diff| / max |w| = ", max_abs / max_weight);
  CHECK(max_abs / max_weight < 1e-3);
}

TEST_CASE(
    "elastic: a stop request stops every peer after the same step -- the leader checkpoints") {
  testing::UseOneThread();
  ClearStopRequest();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 20000, 2000).empty());
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(3);
  TrainConfig c = ElasticConfig(tmp / "data", 1000000);
  c.ckpt_dir = tmp / "ckpt";
  std::vector<std::unique_ptr<Trainer>> peers(3);
  std::vector<absl::Status> results(3);
  for (int r = 0; r < 3; ++r) peers[r] = MakePeer(hosts, r, c, /*watch_signals=*/true);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) threads.emplace_back([&, r] { results[r] = peers[r]->Run(); });
  absl::SleepFor(absl::Milliseconds(1500));
  RequestStop();  // as SIGTERM would (one flag for the whole process here)
  for (auto& t : threads) t.join();
  ClearStopRequest();
  for (int r = 0; r < 3; ++r) CHECK_MESSAGE(results[r].ok(), "rank ", r, ": ", results[r]);
  const int64_t stopped = peers[0]->step();
  CHECK(stopped > 0);
  CHECK(peers[1]->step() == stopped);
  CHECK(peers[2]->step() == stopped);
  std::vector<std::string> problems;
  auto ckpt = ckpt::OpenLatestValidCheckpoint(tmp / "ckpt", &problems);
  REQUIRE_MESSAGE(ckpt.ok(), ckpt.status().ToString());
  CHECK(ckpt->meta().step == stopped);
  CHECK(ckpt->meta().epoch >= 1);
}

TEST_CASE("elastic: without quorum a peer waits, then gives up after `wait` naming why") {
  testing::UseOneThread();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 5000, 500).empty());
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(2);
  std::unique_ptr<Trainer> lonely =
      MakePeer(hosts, 0, ElasticConfig(tmp / "data", 10), false, true, absl::Seconds(1));
  const absl::Status st = lonely->Run();
  CHECK(absl::IsDeadlineExceeded(st));
  const std::string msg(st.message());
  CHECK(msg.find("not admitted to a training view within --wait") != std::string::npos);
  CHECK(msg.find(hosts[1].Endpoint()) != std::string::npos);  // who is missing
  CHECK(lonely->step() == 0);
}

TEST_CASE("elastic: a joiner asked to stop while it receives the state leaves at once") {
  // The source's transfers stall after one chunk (a test hook), as a large state on a
  // slow link keeps a joiner receiving for minutes. A stop request (SIGTERM) must end
  // the joiner's transfer within a poll, not after the transfer's idle timeout (30 s
  // here): the joiner has not trained, so it leaves the job at once; the source, which
  // has, stops after its next step.
  testing::UseOneThread();
  ClearStopRequest();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 5000, 500).empty());
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(2);
  auto tweak = [](ElasticOptions& e) {
    e.min_peers = 1;
    e.transfer.idle_timeout = absl::Seconds(30);
    e.transfer.chunk_bytes = 4096;
    e.transfer.test_stall_after_chunks = 1;
  };
  auto source_board = std::make_shared<observe::StatusBoard>(observe::BoardOptions{});
  std::unique_ptr<Trainer> source =
      MakePeer(hosts, 0, ElasticConfig(tmp / "data", 1000000), /*watch_signals=*/true, true,
               absl::Seconds(60), tweak, source_board);
  absl::Status source_result, joiner_result;
  std::thread source_thread([&] { source_result = source->Run(); });
  const int64_t start_ms = NowMs();
  while (StepsDone(*source_board) < 3 && NowMs() - start_ms < 30000 * kSlow) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (StepsDone(*source_board) < 3) {  // no joiner to wait for: the source's stop vote is its own
    RequestStop();
    source_thread.join();
    ClearStopRequest();
    FAIL("the source did not complete 3 steps within ", 30 * kSlow, " s: ", source_result);
  }

  auto board = std::make_shared<observe::StatusBoard>(observe::BoardOptions{});
  std::unique_ptr<Trainer> joiner =
      MakePeer(hosts, 1, ElasticConfig(tmp / "data", 1000000), /*watch_signals=*/true, true,
               absl::Seconds(60), [&](ElasticOptions& e) {
                 tweak(e);
                 e.board = board;
               });
  std::atomic<int64_t> joiner_done_ms{-1};
  std::thread joiner_thread([&] {
    joiner_result = joiner->Run();
    joiner_done_ms = NowMs();
  });
  const int64_t join_ms = NowMs();
  while (board->Snapshot().state != "receiving_state" && NowMs() - join_ms < 30000 * kSlow) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const bool receiving = board->Snapshot().state == "receiving_state";
  absl::SleepFor(absl::Milliseconds(300));  // well inside the stalled transfer
  const int64_t stop_ms = NowMs();
  RequestStop();  // as SIGTERM would (one flag for the whole process here)
  joiner_thread.join();
  source_thread.join();
  ClearStopRequest();
  REQUIRE(receiving);
  CHECK_MESSAGE(joiner_result.ok(), joiner_result.ToString());
  CHECK_MESSAGE(source_result.ok(), source_result.ToString());
  const double joiner_s = (joiner_done_ms.load() - stop_ms) / 1000.0;
  MESSAGE("the joiner left ", joiner_s, " s after the stop request");
  CHECK(joiner_s < 3.0 * kSlow);
  CHECK(joiner->step() == 0);
  CHECK(source->step() >= 3);
}

TEST_CASE("elastic: a ring formation given up leaves no thread behind -- the node goes with it") {
  // Peer 1 is a membership service only: it joins the view but never forms the ring,
  // so peer 0 sits in the view's ring formation (waiting for its predecessor) until
  // it gives it up. The formation's thread must not outlive the peer: it held the
  // node (listener, io threads, handshakes, sealed links) for the rest of the form
  // wait, also after main() had returned in `train`, where OpenSSL used on those
  // threads while exit() runs OPENSSL_cleanup crashes the process with SIGSEGV.
  testing::UseOneThread();
  ClearStopRequest();
  TempDir tmp;
  REQUIRE(testing::WriteMarkovData(tmp / "data", 40, 5000, 500).empty());
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(2);

  auto node1 = net::TcpNode::Start(NodeOptions(hosts, 1));
  REQUIRE_MESSAGE(node1.ok(), node1.status().ToString());
  cluster::MembershipServiceOptions so;
  so.node = *node1;
  so.peer_timeout_ms = 1000 * kSlow;
  so.heartbeat_interval_ms = 100;
  so.proposal_timeout_ms = 500 * kSlow;
  so.startup_grace_ms = 3000 * kSlow;
  so.initial_state = {0, 0};  // what a fresh trainer holds: no state transfer
  auto service1 = cluster::MembershipService::Start(std::move(so));
  REQUIRE_MESSAGE(service1.ok(), service1.status().ToString());

  std::weak_ptr<net::TcpNode> node0;
  std::unique_ptr<Trainer> peer =
      MakePeer(hosts, 0, ElasticConfig(tmp / "data", 1000000), /*watch_signals=*/true, true,
               absl::Seconds(60), [&](ElasticOptions& e) { node0 = e.node; });
  absl::Status result;
  std::thread runner([&] { result = peer->Run(); });

  // Peer 0 dials its successor (peer 1) on the ring channel of the view: it is forming.
  const absl::Time end = absl::Now() + absl::Seconds(30 * kSlow);
  while (absl::Now() < end &&
         ((*service1)->view().members.size() != 2 || !(*service1)->CanTrain())) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  const cluster::View view = (*service1)->view();
  std::shared_ptr<net::PendingLink> dialled =
      (*node1)->AcceptFrom(0, cluster::RingChannel(view), end);
  const bool forming = dialled->Wait(end - absl::Now()) && dialled->Take().ok();

  RequestStop();  // as SIGTERM would: a peer that has not trained leaves at once
  runner.join();
  ClearStopRequest();
  REQUIRE_MESSAGE(forming, "peer 0 never dialled the ring of view ", view.ToString());
  CHECK_MESSAGE(result.ok(), result.ToString());
  CHECK(peer->step() == 0);
  peer.reset();
  // Nothing of the peer holds its node now (a poll: io handlers let go of theirs).
  const int64_t start_ms = NowMs();
  while (!node0.expired() && NowMs() - start_ms < 1000 * kSlow) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  MESSAGE("peer 0's node released ", (NowMs() - start_ms) / 1000.0, " s after the peer");
  CHECK(node0.expired());
  (*service1)->Stop();
}

}  // namespace rt::train
