// SlotBalancer: shares sum to the global batch, follow speed, ignore noise
// (hysteresis), exclude peers past --max-skew (and re-measure them), start equal in
// a new view, and are a pure function of the inputs (every peer computes the same).
#include "train/slot_balancer.h"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

namespace rt::train {
namespace {

int Sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), 0); }

// Feeds `steps` steps of peers whose seconds per slot are `speed` (by position) and
// returns the shares of the last step.
std::vector<int> Run(SlotBalancer* b, const std::vector<int>& members,
                     const std::vector<double>& seconds_per_slot, int64_t first_step, int steps) {
  std::vector<int> shares;
  for (int64_t s = first_step; s < first_step + steps; ++s) {
    shares = b->Assign(members, s);
    std::vector<double> compute(members.size());
    for (size_t p = 0; p < members.size(); ++p) compute[p] = shares[p] * seconds_per_slot[p];
    b->Observe(members, compute, shares);
  }
  return shares;
}

TEST_CASE("equal shares sum to the global batch, the first positions take the remainder") {
  CHECK(SlotBalancer::EqualShares(10, 3) == std::vector<int>{4, 3, 3});
  CHECK(SlotBalancer::EqualShares(2, 3) == std::vector<int>{1, 1, 0});
  CHECK(SlotBalancer::EqualShares(8, 1) == std::vector<int>{8});
}

TEST_CASE("best shares are proportional to speed and minimise the slowest peer's time") {
  // Peer 1 takes twice as long per slot: it gets a third of the slots.
  std::vector<int> s = SlotBalancer::BestShares(24, {0.01, 0.02}, {1, 1});
  CHECK(s == std::vector<int>{16, 8});
  CHECK(SlotBalancer::PredictedSeconds(s, {0.01, 0.02}) == doctest::Approx(0.16));
  // Three peers 1:2:4 in speed over 7 slots: 4, 2, 1.
  CHECK(SlotBalancer::BestShares(7, {1, 2, 4}, {1, 1, 1}) == std::vector<int>{4, 2, 1});
  // A peer with a 0 minimum that is much slower gets nothing.
  CHECK(SlotBalancer::BestShares(8, {1, 100}, {1, 0}) == std::vector<int>{8, 0});
  // No split of 16 slots over these speeds finishes sooner than the greedy one.
  const std::vector<double> t = {0.013, 0.021, 0.034};
  const double best = SlotBalancer::PredictedSeconds(SlotBalancer::BestShares(16, t, {1, 1, 1}), t);
  for (int a = 1; a <= 14; ++a) {
    for (int b = 1; a + b <= 15; ++b) {
      CHECK(SlotBalancer::PredictedSeconds({a, b, 16 - a - b}, t) >= best - 1e-12);
    }
  }
}

TEST_CASE("the first step is equal, then shares follow the measured speeds") {
  SlotBalancer b(32, BalanceOptions{});
  const std::vector<int> members = {0, 1};
  CHECK(b.Assign(members, 0) == std::vector<int>{16, 16});
  const std::vector<int> later = Run(&b, members, {0.010, 0.020}, 0, 5);
  CHECK(Sum(later) == 32);
  CHECK(later[0] >= 20);  // ideal: 21.3 and 10.7
  CHECK(later[0] <= 22);
}

TEST_CASE("--balance off keeps the equal split whatever the speeds") {
  BalanceOptions off;
  off.enabled = false;
  SlotBalancer b(32, off);
  CHECK(Run(&b, {0, 1}, {0.010, 0.030}, 0, 10) == std::vector<int>{16, 16});
}

TEST_CASE("hysteresis: small speed differences and noise do not move slots") {
  SlotBalancer b(32, BalanceOptions{});
  const std::vector<int> members = {0, 1, 2};
  // 3% apart: the equal split is within the 5% threshold of the best one.
  std::vector<int> first = Run(&b, members, {0.0100, 0.0103, 0.0101}, 0, 3);
  CHECK(first == std::vector<int>{11, 11, 10});
  // Alternating +-2% noise on a 2:1 ring: after settling, no change for 30 steps.
  SlotBalancer c(30, BalanceOptions{});
  Run(&c, {0, 1}, {0.01, 0.02}, 0, 10);
  std::vector<int> settled = c.Assign({0, 1}, 10);
  int changes = 0;
  for (int64_t s = 10; s < 40; ++s) {
    std::vector<int> sh = c.Assign({0, 1}, s);
    if (sh != settled) ++changes;
    settled = sh;
    const double noise = (s % 2 == 0) ? 1.02 : 0.98;
    c.Observe({0, 1}, {sh[0] * 0.01 * noise, sh[1] * 0.02 / noise}, sh);
  }
  CHECK(changes == 0);
}

TEST_CASE("the split follows when another peer becomes the slow one, within 10 steps") {
  SlotBalancer b(48, BalanceOptions{});
  const std::vector<int> members = {4, 7, 9};  // ids need not be positions
  std::vector<int> s = Run(&b, members, {0.01, 0.02, 0.01}, 0, 10);
  CHECK(s[1] < s[0]);
  CHECK(s[1] < s[2]);
  s = Run(&b, members, {0.01, 0.01, 0.02}, 10, 10);
  CHECK(s[2] < s[0]);
  CHECK(s[2] < s[1]);
  CHECK(s[1] >= 17);
  CHECK(Sum(s) == 48);
}

TEST_CASE("shares are keyed by peer id, not position: a re-ordered ring keeps them") {
  SlotBalancer b(30, BalanceOptions{});
  Run(&b, {0, 1}, {0.01, 0.02}, 0, 8);
  const std::vector<int> a = b.Assign({0, 1}, 8);
  const std::vector<int> r = b.Assign({1, 0}, 9);
  CHECK(a[0] == r[1]);
  CHECK(a[1] == r[0]);
}

TEST_CASE("a peer past --max-skew may get 0 slots and is re-measured now and then") {
  BalanceOptions o;
  o.max_skew = 4;
  o.remeasure_every = 8;
  SlotBalancer b(16, o);
  const std::vector<int> members = {0, 1};
  // 10x slower: within the rule it could be left out, but one slot of it (0.1 s)
  // still ends before 16 slots of the fast peer (0.16 s): the best split keeps it.
  Run(&b, members, {0.01, 0.1}, 1, 6);
  CHECK(b.Assign(members, 7) == std::vector<int>{15, 1});
  // 30x slower: it would hold the step up, so it gets nothing except on re-measure steps.
  SlotBalancer c(16, o);
  Run(&c, members, {0.01, 0.3}, 1, 6);
  CHECK(c.Assign(members, 7) == std::vector<int>{16, 0});
  CHECK(c.Assign(members, 8) == std::vector<int>{15, 1});  // re-measurement
  // It became fast again: re-measurements bring it back, then it is measured every step.
  c.Observe(members, {15 * 0.01, 1 * 0.01}, {15, 1});
  std::vector<int> s = Run(&c, members, {0.01, 0.01}, 9, 30);
  CHECK(s[1] >= 6);
  // 3x slower is within --max-skew 4: it keeps at least one slot whatever the split.
  CHECK(SlotBalancer::BestShares(2, {0.01, 0.03}, {1, 1}) == std::vector<int>{1, 1});
  // Past --max-skew, the minimum is 0 (computed by Assign): the fast peer takes both.
  SlotBalancer d(2, o);
  CHECK(Run(&d, members, {0.01, 0.05}, 1, 6) == std::vector<int>{2, 0});
}

TEST_CASE("fewer slots than peers: some get none, the sum holds") {
  SlotBalancer b(2, BalanceOptions{});
  std::vector<int> s = Run(&b, {0, 1, 2}, {0.01, 0.02, 0.03}, 0, 5);
  CHECK(Sum(s) == 2);
  CHECK(s[0] >= 1);
}

TEST_CASE("a new member set or Reset starts equal again") {
  SlotBalancer b(30, BalanceOptions{});
  Run(&b, {0, 1}, {0.01, 0.03}, 0, 6);
  CHECK(b.Assign({0, 1}, 6) != std::vector<int>{15, 15});
  CHECK(b.Assign({0, 1, 2}, 7) == std::vector<int>{10, 10, 10});
  CHECK(b.seconds_per_slot(0) < 0);
  Run(&b, {0, 1}, {0.01, 0.03}, 8, 6);
  b.Reset();
  CHECK(b.Assign({0, 1}, 14) == std::vector<int>{15, 15});
}

TEST_CASE("two balancers fed the same figures agree at every step (deterministic)") {
  SlotBalancer a(37, BalanceOptions{}), b(37, BalanceOptions{});
  const std::vector<int> members = {2, 0, 1};
  for (int64_t s = 0; s < 40; ++s) {
    const std::vector<int> sa = a.Assign(members, s), sb = b.Assign(members, s);
    REQUIRE(sa == sb);
    REQUIRE(Sum(sa) == 37);
    std::vector<double> compute(3);
    for (int p = 0; p < 3; ++p) compute[p] = sa[p] * (0.01 + 0.003 * ((s * 7 + p * 3) % 5));
    a.Observe(members, compute, sa);
    b.Observe(members, compute, sa);
  }
}

}  // namespace
}  // namespace rt::train
