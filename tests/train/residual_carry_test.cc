// Error feedback across cluster views: a peer of an elastic ring leaves
// mid-run (its sockets close, as after kill -9) and comes back; every view has a new
// RingGradientReducer, but each peer's residuals carry over (CarriedCommState), and
// the step the departure interrupted is rolled back. Checked as conservation, exactly:
// for every surviving peer and every coordinate, what it has sent in applied steps
// plus what it still holds equals the sum of the gradients it fed into exchanges.
//
// How "what it has sent" is seen: each host's gradients are non-zero only on the
// coordinates i with i % 3 == host, so there the ring's sum is that host's top-k
// contribution alone. Gradients are small integers, so every value (sums, residuals,
// bf16 of the selected values) is exact and the check is ==, not a tolerance.
// The same run without carried state (a fresh residual per view, the old behaviour)
// must break the balance: the test can fail.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "core/status_macros.h"
#include "net/net_test_util.h"
#include "train/elastic_reducer.h"
#include "train/ring_gradient_reducer.h"

namespace rt::train {
namespace {

constexpr int kHosts = 3;
constexpr size_t kLength = 30000;    // one bucket
constexpr int64_t kLeaveAfter = 20;  // host 2 completes this many steps, then goes away
constexpr int64_t kStepsAfterRejoin = 20;

#ifdef RINGTRAIN_SANITIZED
constexpr int kSlow = 5;
#else
constexpr int kSlow = 1;
#endif

// Host h's gradient of `step`: integers in [-8, 8] on the coordinates it owns.
void FillGradient(int host, int64_t step, std::vector<float>* g) {
  uint64_t s = (static_cast<uint64_t>(host) * 1000003u + static_cast<uint64_t>(step)) *
                   0x9E3779B97F4A7C15ull +
               1;
  for (size_t i = 0; i < g->size(); ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    (*g)[i] = i % kHosts == static_cast<size_t>(host) ? static_cast<float>(s % 17) - 8.0f : 0.0f;
  }
}

// One host's process: node, elastic reducer, its state and ledger.
struct Peer {
  int host = 0;
  int64_t step = 0;
  std::vector<float> params = std::vector<float>(64, 0.5f);  // state the views transfer
  std::shared_ptr<CarriedCommState> carried;                 // the latest view's
  std::unique_ptr<ElasticReducer> reducer;
  // Per coordinate this host owns: gradients fed into an exchange, and what it sent
  // in applied steps (the ring's sum there).
  std::vector<double> fed = std::vector<double>(kLength, 0.0);
  std::vector<double> sent = std::vector<double>(kLength, 0.0);
  int failed_steps = 0, views = 0;
};

std::unique_ptr<Peer> StartPeer(const std::vector<net::HostEntry>& hosts, int host,
                                bool carry_over) {
  auto peer = std::make_unique<Peer>();
  peer->host = host;
  net::TcpNodeOptions no;
  no.hosts = hosts;
  no.self_rank = host;
  no.secret = "residual-carry-secret-0123";
  no.fingerprint = {{"test", "residual carry"}};
  no.handshake_timeout = absl::Seconds(5);
  no.socket_buffer_bytes = 0;
  auto node = net::TcpNode::Start(no);
  REQUIRE_MESSAGE(node.ok(), node.status().ToString());
  ElasticOptions e;
  e.node = *node;
  e.peer_timeout_ms = 1000 * kSlow;
  e.startup_grace_ms = 3000 * kSlow;
  e.wait = absl::Seconds(60);
  e.watch_signals = false;
  e.ckpt_shared = true;
  Peer* p = peer.get();
  e.make_reducer = [p, carry_over](std::unique_ptr<net::TcpRing> ring, const cluster::View& view)
      -> absl::StatusOr<std::unique_ptr<GradientReducer>> {
    if (!carry_over || p->carried == nullptr) p->carried = std::make_shared<CarriedCommState>();
    ++p->views;
    RingReducerOptions o;
    o.check_every = 0;
    o.buckets.bucket_bytes = kLength * sizeof(float);
    o.buckets.codec = *collective::ParseCodecSpec("topk:0.05");
    o.comm.probe_every = -1;
    o.comm.channel_salt = cluster::RingChannel(view);
    o.carried = p->carried;
    return std::unique_ptr<GradientReducer>(
        std::make_unique<RingGradientReducer>(std::move(ring), std::move(o)));
  };
  auto reducer = ElasticReducer::Create(std::move(e));
  REQUIRE_MESSAGE(reducer.ok(), reducer.status().ToString());
  peer->reducer = *std::move(reducer);
  return peer;
}

// The training loop of gradient_reducer.h without a model, until `*stop_at` steps are
// done. `rejoining`: this is host 2 back; once it trains in a view of three, every
// peer stops kStepsAfterRejoin steps later. Until then the others step slowly (joiners
// are admitted at step boundaries), for at most a minute.
absl::Status Train(Peer* p, std::atomic<int64_t>* stop_at, bool rejoining) {
  RETURN_IF_ERROR(
      p->reducer->AttachState({&p->step, {{"params", absl::MakeSpan(p->params)}}, nullptr}, 0));
  std::vector<float> grads(kLength), fed(kLength);
  const absl::Time deadline = absl::Now() + absl::Seconds(60 * kSlow);
  while (p->step < stop_at->load()) {
    ASSIGN_OR_RETURN(BoundaryAction action, p->reducer->AtStepBoundary());
    if (action == BoundaryAction::kStop) break;
    if (rejoining && p->reducer->peers() == kHosts && stop_at->load() == INT64_MAX) {
      stop_at->store(p->step + kStepsAfterRejoin);
    }
    if (!rejoining && p->step >= kLeaveAfter && stop_at->load() == INT64_MAX) {
      if (absl::Now() > deadline) return absl::DeadlineExceededError("host 2 never came back");
      absl::SleepFor(absl::Milliseconds(20));
    }
    FillGradient(p->host, p->step, &fed);
    grads = fed;
    absl::Status st = p->reducer->BeginStep(p->step, absl::MakeSpan(grads));
    const bool entered = st.ok();  // one bucket: its exchange ran (and selected)
    if (st.ok()) {
      p->reducer->OnGradReady(0);
      StepTotals totals;
      totals.tokens = 1;
      st = p->reducer->Finish(&totals);
    }
    if (entered) {
      // Top-k's undo keeps a step that was not applied in the residual (as if
      // nothing had been selected): its gradient counts as fed either way.
      for (size_t i = p->host; i < kLength; i += kHosts) p->fed[i] += fed[i];
    }
    if (!st.ok()) {
      ++p->failed_steps;
      RETURN_IF_ERROR(p->reducer->StepFailed(st));
      continue;
    }
    for (size_t i = p->host; i < kLength; i += kHosts) p->sent[i] += grads[i];
    ++p->step;
    p->reducer->StepCompleted(p->step);
  }
  return absl::OkStatus();
}

struct Balance {
  int mismatches = 0;    // owned coordinates where fed != sent + held
  double held_abs = 0;   // sum of |residual| on owned coordinates
  double max_error = 0;  // largest |fed - sent - held|
};

Balance CheckBalance(const Peer& p) {
  Balance b;
  REQUIRE(p.carried != nullptr);
  REQUIRE(p.carried->buckets != nullptr);
  absl::Span<const float> held = p.carried->buckets->residual(0);
  REQUIRE(held.size() == kLength);
  for (size_t i = p.host; i < kLength; i += kHosts) {
    const double error = p.fed[i] - p.sent[i] - held[i];
    b.held_abs += std::fabs(held[i]);
    b.max_error = std::max(b.max_error, std::fabs(error));
    if (error != 0) ++b.mismatches;
  }
  return b;
}

// Hosts 0 and 1 train kSteps steps; host 2 leaves after kLeaveAfter and restarts
// from nothing. Returns the survivors.
std::vector<std::unique_ptr<Peer>> LeaveAndRejoin(bool carry_over) {
  const std::vector<net::HostEntry> hosts = net::testing::LoopbackHosts(kHosts);
  std::vector<std::unique_ptr<Peer>> peers;
  for (int h = 0; h < kHosts; ++h) peers.push_back(StartPeer(hosts, h, carry_over));
  std::vector<absl::Status> results(kHosts);
  std::atomic<int64_t> stop_at{INT64_MAX};
  std::vector<std::thread> threads;
  for (int h = 0; h < 2; ++h) {
    threads.emplace_back([&, h] { results[h] = Train(peers[h].get(), &stop_at, false); });
  }
  std::atomic<int64_t> leave_at{kLeaveAfter};
  results[2] = Train(peers[2].get(), &leave_at, false);
  CHECK_MESSAGE(results[2].ok(), results[2].ToString());
  CHECK(peers[2]->step == kLeaveAfter);
  peers[2].reset();  // its sockets close mid-run for the others
  auto back = StartPeer(hosts, 2, carry_over);
  absl::Status rejoined = Train(back.get(), &stop_at, true);
  for (std::thread& t : threads) t.join();
  CHECK_MESSAGE(rejoined.ok(), rejoined.ToString());
  CHECK(back->step == stop_at.load());
  CHECK(back->step > kLeaveAfter + kStepsAfterRejoin);
  for (int h = 0; h < 2; ++h) {
    CHECK_MESSAGE(results[h].ok(), "host ", h, ": ", results[h].ToString());
    CHECK(peers[h]->step == stop_at.load());
    CHECK(peers[h]->views >= 3);  // 3 hosts, then 2, then 3 again
  }
  peers.pop_back();
  return peers;
}

}  // namespace

TEST_CASE(
    "elastic: error-feedback residuals survive a peer leaving and rejoining: sent + held "
    "equals the gradients fed, exactly") {
  auto survivors = LeaveAndRejoin(/*carry_over=*/true);
  for (const auto& p : survivors) {
    const Balance b = CheckBalance(*p);
    MESSAGE("host ", p->host, ": ", p->views, " views, ", p->failed_steps,
            " failed step(s), |held| ", b.held_abs, ", ", b.mismatches, " coordinates off");
    CHECK(b.mismatches == 0);
    CHECK(b.held_abs > 0);  // top-k 5% keeps most of each step for later
  }

  // The old behaviour (each view's reducer starts with empty residuals) loses what
  // the peers held when the views changed.
  auto fresh = LeaveAndRejoin(/*carry_over=*/false);
  int off = 0;
  for (const auto& p : fresh) off += CheckBalance(*p).mismatches;
  MESSAGE("fresh residuals per view: ", off, " coordinates off balance");
  CHECK(off > 0);
}

}  // namespace rt::train
