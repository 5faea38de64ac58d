// RoundBalancer (round sync's inner-step shares by speed): the plan follows the reported
// speeds, is a pure function of the figures every peer receives (balancers with
// different histories agree), starts from the equal split when the reported shares do
// not make up the batch, keeps the split while a peer is unmeasured, belongs to the view
// it was made in (by member id); every split's slots partition the global batch, the
// equal one strided as without balancing; over simulated rounds the wait at the outer
// step drops to a slot's worth.
#include "train/round_balancer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace rt::train {
namespace {

int Sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

std::vector<RoundFigures> Figures(const std::vector<double>& seconds_per_slot,
                                  const std::vector<int>& shares, int steps = 10) {
  std::vector<RoundFigures> all;
  for (size_t p = 0; p < shares.size(); ++p) {
    RoundFigures f;
    f.seconds_per_slot = seconds_per_slot[p];
    f.compute_s = seconds_per_slot[p] > 0 ? steps * shares[p] * seconds_per_slot[p] : 0;
    f.share = shares[p];
    all.push_back(f);
  }
  return all;
}

TEST_CASE("round figures travel as integers and come back bit for bit, bad ones are refused") {
  RoundFigures f;
  f.compute_s = 1.0 / 3.0;
  f.seconds_per_slot = 0.0123456789;
  f.share = 7;
  const auto v = f.Encode();
  auto back = RoundFigures::Decode(v, 0, 32);
  REQUIRE(back.ok());
  CHECK(back->compute_s == f.compute_s);
  CHECK(back->seconds_per_slot == f.seconds_per_slot);
  CHECK(back->share == 7);
  RoundFigures none;  // never measured: -1
  REQUIRE(RoundFigures::Decode(none.Encode(), 1, 32).ok());

  auto refused = [](RoundFigures g, int slots = 32) {
    const auto s = RoundFigures::Decode(g.Encode(), 2, slots);
    return !s.ok() && s.status().message().find("ring position 2") != std::string::npos;
  };
  RoundFigures g = f;
  g.compute_s = std::numeric_limits<double>::quiet_NaN();
  CHECK(refused(g));
  g = f;
  g.compute_s = -1;
  CHECK(refused(g));
  g = f;
  g.seconds_per_slot = std::numeric_limits<double>::infinity();
  CHECK(refused(g));
  g = f;
  g.seconds_per_slot = -0.5;  // only -1 means "none"
  CHECK(refused(g));
  g = f;
  g.share = 33;
  CHECK(refused(g));
  g = f;
  g.share = -1;
  CHECK(refused(g));
  const int64_t two[2] = {0, 0};
  CHECK(!RoundFigures::Decode(two, 0, 32).ok());
}

TEST_CASE("every split's slots partition the global batch, the equal split is strided") {
  // Equal split: BatchSampler::SlotsOf's rank, rank + N, ... (round sync without balancing).
  CHECK(RoundBalancer::SlotsOf({4, 3, 3}, 0) == std::vector<int>{0, 3, 6, 9});
  CHECK(RoundBalancer::SlotsOf({4, 3, 3}, 2) == std::vector<int>{2, 5, 8});
  CHECK(RoundBalancer::SlotsOf({8}, 0) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  // Any other split: contiguous ranges in ring order.
  CHECK(RoundBalancer::SlotsOf({5, 5, 2}, 1) == std::vector<int>{5, 6, 7, 8, 9});
  CHECK(RoundBalancer::SlotsOf({5, 5, 2}, 2) == std::vector<int>{10, 11});
  CHECK(RoundBalancer::SlotsOf({5, 5, 2}, 3).empty());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    const int slots = static_cast<int>(rng() % 40);
    std::vector<int> shares(n, 0);  // random split, zeros included
    for (int s = 0; s < slots; ++s) ++shares[rng() % n];
    if (trial % 5 == 0) shares = SlotBalancer::EqualShares(slots, n);
    std::vector<int> seen(slots, 0);
    for (int p = 0; p < n; ++p) {
      const std::vector<int> mine = RoundBalancer::SlotsOf(shares, p);
      CHECK(static_cast<int>(mine.size()) == shares[p]);
      for (int s : mine) {
        REQUIRE(s >= 0);
        REQUIRE(s < slots);
        ++seen[s];
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
  }
}

TEST_CASE("the plan follows the reported speeds and sums to the global batch") {
  const BalanceOptions o;
  // Peer 2 takes 3x as long per slot: it gets about a seventh, the others three sevenths.
  const std::vector<int> plan = RoundBalancer::PlanShares(28, o, Figures({1, 1, 3}, {10, 9, 9}), 1);
  CHECK(plan == std::vector<int>{12, 12, 4});
  CHECK(Sum(plan) == 28);
  // Within the hysteresis (5%) the reported split stays.
  CHECK(RoundBalancer::PlanShares(28, o, Figures({1, 1.02, 1}, {10, 9, 9}), 1) ==
        std::vector<int>{10, 9, 9});
  // A peer not measured yet (a joiner, or never given a slot): the split stays.
  CHECK(RoundBalancer::PlanShares(28, o, Figures({1, -1, 3}, {10, 9, 9}), 1) ==
        std::vector<int>{10, 9, 9});
  // Reported shares that do not make up the batch (the peers disagreed, a view changed
  // in the round): the plan starts from the equal split.
  CHECK(RoundBalancer::PlanShares(28, o, Figures({1, -1, 3}, {10, 10, 9}), 1) ==
        std::vector<int>{10, 9, 9});
  // --balance off and one peer: the equal split whatever the speeds.
  BalanceOptions off;
  off.enabled = false;
  CHECK(RoundBalancer::PlanShares(28, off, Figures({1, 1, 3}, {10, 9, 9}), 1) ==
        std::vector<int>{10, 9, 9});
  CHECK(RoundBalancer::PlanShares(28, o, Figures({5}, {28}), 1) == std::vector<int>{28});
}

TEST_CASE("a peer past --max-skew gets no slot, and one in every remeasure_every rounds") {
  BalanceOptions o;
  o.max_skew = 8;
  o.remeasure_every = 4;
  const auto figures = Figures({1, 30}, {8, 8});
  CHECK(RoundBalancer::PlanShares(16, o, figures, 1) == std::vector<int>{16, 0});
  CHECK(RoundBalancer::PlanShares(16, o, figures, 4) == std::vector<int>{15, 1});
}

TEST_CASE("balancers with different histories plan the same from the same figures") {
  const BalanceOptions o;
  const std::vector<int> members = {3, 5, 9};
  RoundBalancer fresh(24, o), old(24, o);
  // `old` has planned before, from other figures and in another view.
  old.AddInnerStep(0.5, 8);
  (void)old.Report(members, 0, 1);
  (void)old.Plan(Figures({1, 2, 4}, {8, 8, 8}), members, 1, 1, 10);
  old.AddInnerStep(0.7, 3);
  const auto figures = Figures({0.010, 0.011, 0.030}, {8, 8, 8});
  const std::vector<int> a = fresh.Plan(figures, members, 2, 2, 20);
  const std::vector<int> b = old.Plan(figures, members, 2, 2, 20);
  CHECK(a == b);
  CHECK(a == RoundBalancer::PlanShares(24, o, figures, 2));
  CHECK(fresh.Shares(members, 2) == old.Shares(members, 2));
  CHECK(a[2] < 8);
}

TEST_CASE("a plan belongs to its view, by member id") {
  RoundBalancer b(24, BalanceOptions{});
  const std::vector<int> members = {3, 5, 9};
  CHECK(b.Shares(members, 4) == std::vector<int>{8, 8, 8});  // no plan yet: equal
  const std::vector<int> plan = b.Plan(Figures({1, 1, 3}, {8, 8, 8}), members, 4, 1, 10);
  REQUIRE(plan != std::vector<int>{8, 8, 8});
  CHECK(b.Shares(members, 4) == plan);
  // The ring re-ordered itself (a link probe): each peer keeps its own share.
  CHECK(b.Shares({9, 3, 5}, 4) == std::vector<int>{plan[2], plan[0], plan[1]});
  // Another view: another epoch, or other members: the equal split.
  CHECK(b.Shares(members, 5) == std::vector<int>{8, 8, 8});
  CHECK(b.Shares({3, 5}, 4) == std::vector<int>{12, 12});
  CHECK(b.Shares({3, 5, 7}, 4) == std::vector<int>{8, 8, 8});
}

TEST_CASE("a peer's report: its round's speed, kept through rounds without slots") {
  RoundBalancer b(12, BalanceOptions{});
  const std::vector<int> members = {0, 1};
  RoundFigures f = b.Report(members, 1, 1);
  CHECK(f.seconds_per_slot == -1);  // never measured
  CHECK(f.share == 6);
  b.AddInnerStep(0.30, 6);
  b.AddInnerStep(0.30, 6);
  f = b.Report(members, 1, 1);
  CHECK(f.compute_s == doctest::Approx(0.60));
  CHECK(f.seconds_per_slot == doctest::Approx(0.05));
  // A round without slots (sat out, or a share of 0): no compute, the last speed.
  f = b.Report(members, 1, 1);
  CHECK(f.compute_s == 0);
  CHECK(f.seconds_per_slot == doctest::Approx(0.05));
}

TEST_CASE("simulated rounds: every peer plans alike and the wait at the outer step drops") {
  // Three peers whose slots take 10, 12 and 40 ms, H = 20, 36 slots per step. Each peer
  // has its own balancer; all of them receive the same figures, as from the ring.
  const std::vector<double> speed = {0.010, 0.012, 0.040};
  const std::vector<int> members = {0, 1, 2};
  const int H = 20, G = 36;
  std::vector<RoundBalancer> peers(3, RoundBalancer(G, BalanceOptions{}));
  double first_wait = 0, last_wait = 0;
  for (int round = 1; round <= 5; ++round) {
    const std::vector<int> shares = peers[0].Shares(members, 1);
    for (int p = 1; p < 3; ++p) REQUIRE(peers[p].Shares(members, 1) == shares);
    std::vector<RoundFigures> all;
    for (int p = 0; p < 3; ++p) {
      for (int s = 0; s < H; ++s) peers[p].AddInnerStep(shares[p] * speed[p], shares[p]);
      all.push_back(peers[p].Report(members, p, 1));
    }
    const double wait = RoundBalancer::WaitSeconds(all, 0);
    if (round == 1) first_wait = wait;
    last_wait = wait;
    for (int p = 0; p < 3; ++p) (void)peers[p].Plan(all, members, 1, round, round * H);
  }
  MESSAGE("fastest peer's wait per round: ", first_wait, " s equal, ", last_wait, " s balanced");
  // Equal: 12 slots each, the slow peer 0.48 s a step against 0.12: 7.2 s waited a round.
  CHECK(first_wait == doctest::Approx(H * 12 * (0.040 - 0.010)));
  // Balanced: at most about one slot of the slowest peer per inner step.
  CHECK(last_wait <= H * 0.040 + 1e-9);
  CHECK(peers[0].Shares(members, 1)[2] < 12);
}

}  // namespace
}  // namespace rt::train
