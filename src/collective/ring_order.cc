// Ring order search: exhaustive for small N, greedy + local search above.
#include "collective/ring_order.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "absl/strings/str_format.h"

namespace rt::collective {
namespace {

using Matrix = std::vector<std::vector<double>>;

absl::Status ValidateMatrices(const Matrix& bw, const Matrix& rtt) {
  const size_t n = bw.size();
  if (n == 0) return absl::InvalidArgumentError("ring order: no peers");
  if (rtt.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ring order: bandwidth matrix has %d rows, RTT matrix %d", n, rtt.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (bw[i].size() != n || rtt[i].size() != n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ring order: row %d is not of length %d", i, n));
    }
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      if (!std::isfinite(bw[i][j]) || bw[i][j] < 0 || !std::isfinite(rtt[i][j]) || rtt[i][j] < 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "ring order: link %d->%d has bandwidth %g B/s, RTT %g s (need finite, >= 0)", i, j,
            bw[i][j], rtt[i][j]));
      }
    }
  }
  return absl::OkStatus();
}

// a better than b: the objective, then lexicographically smaller.
bool Better(const RingOrder& a, const RingOrder& b) {
  if (RingOrderBetter(a, b)) return true;
  if (RingOrderBetter(b, a)) return false;
  return a.order < b.order;
}

// Rotates so that peer 0 comes first.
std::vector<int> StartAtZero(const std::vector<int>& order) {
  std::vector<int> out(order);
  auto it = std::find(out.begin(), out.end(), 0);
  std::rotate(out.begin(), it, out.end());
  return out;
}

// Nearest-neighbour tour from `start`: next = unvisited peer with the fastest link,
// then the smallest RTT, then the smallest index.
std::vector<int> GreedyFrom(const Matrix& bw, const Matrix& rtt, int start) {
  const int n = static_cast<int>(bw.size());
  std::vector<bool> used(n, false);
  std::vector<int> order{start};
  used[start] = true;
  for (int step = 1; step < n; ++step) {
    int cur = order.back(), best = -1;
    for (int j = 0; j < n; ++j) {
      if (used[j]) continue;
      if (best < 0 || bw[cur][j] > bw[cur][best] ||
          (bw[cur][j] == bw[cur][best] && rtt[cur][j] < rtt[cur][best])) {
        best = j;
      }
    }
    used[best] = true;
    order.push_back(best);
  }
  return order;
}

// First-improvement local search: 2-opt segment reversals and single-peer moves,
// repeated until no move improves (bounded number of rounds). The ring objective
// guides it: fewer links at the bottleneck is progress toward a higher bottleneck
// even while the bottleneck itself does not move yet.
RingOrder LocalSearch(const Matrix& bw, const Matrix& rtt, RingOrder cur) {
  const int n = static_cast<int>(cur.order.size());
  for (int round = 0; round < 100; ++round) {
    bool improved = false;
    for (int i = 1; i < n && !improved; ++i) {
      for (int j = i + 1; j < n && !improved; ++j) {
        std::vector<int> cand = cur.order;
        std::reverse(cand.begin() + i, cand.begin() + j + 1);
        RingOrder c = EvaluateRingOrder(bw, rtt, cand);
        if (RingOrderBetter(c, cur)) cur = c, improved = true;
      }
    }
    for (int i = 1; i < n && !improved; ++i) {
      for (int j = 1; j < n && !improved; ++j) {
        if (i == j) continue;
        std::vector<int> cand = cur.order;
        int peer = cand[i];
        cand.erase(cand.begin() + i);
        cand.insert(cand.begin() + j, peer);
        RingOrder c = EvaluateRingOrder(bw, rtt, cand);
        if (RingOrderBetter(c, cur)) cur = c, improved = true;
      }
    }
    if (!improved) break;
  }
  return cur;
}

// Depth-first search for a directed Hamiltonian cycle from peer 0 using only
// links with bandwidth >= min_bw; tries the next peer with the fewest onward
// options first (Warnsdorff's rule). Gives up after `budget` expansions.
bool FindCycleAtLeast(const Matrix& bw, double min_bw, std::vector<int>* order, long budget) {
  const int n = static_cast<int>(bw.size());
  std::vector<bool> used(n, false);
  order->assign(1, 0);
  used[0] = true;
  long expansions = 0;
  std::function<bool()> extend = [&]() -> bool {
    if (++expansions > budget) return false;
    const int cur = order->back();
    if (static_cast<int>(order->size()) == n) return bw[cur][0] >= min_bw;
    std::vector<std::pair<int, int>> next;  // (onward options, peer)
    for (int j = 0; j < n; ++j) {
      if (used[j] || bw[cur][j] < min_bw) continue;
      int options = 0;
      for (int k = 0; k < n; ++k) options += !used[k] && k != j && bw[j][k] >= min_bw;
      next.push_back({options, j});
    }
    std::sort(next.begin(), next.end());
    for (const auto& [options, j] : next) {
      used[j] = true;
      order->push_back(j);
      if (extend()) return true;
      order->pop_back();
      used[j] = false;
      if (expansions > budget) return false;
    }
    return false;
  };
  return extend();
}

// A ring whose bottleneck is as high as the bounded search can prove: binary
// search over the distinct link bandwidths.
std::vector<int> HighBottleneckRing(const Matrix& bw) {
  const int n = static_cast<int>(bw.size());
  std::vector<double> levels;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) levels.push_back(bw[i][j]);
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  std::vector<int> best(n), order;
  std::iota(best.begin(), best.end(), 0);  // any ring reaches levels[0]
  size_t lo = 0, hi = levels.size();       // levels[lo] is reachable; hi is not known to be
  while (hi - lo > 1) {
    const size_t mid = (lo + hi) / 2;
    if (FindCycleAtLeast(bw, levels[mid], &order, 20000)) {
      lo = mid;
      best = order;
    } else {
      hi = mid;
    }
  }
  return best;
}

}  // namespace

bool RingOrderBetter(const RingOrder& a, const RingOrder& b) {
  if (a.bottleneck_bps != b.bottleneck_bps) return a.bottleneck_bps > b.bottleneck_bps;
  if (a.bottleneck_links != b.bottleneck_links) return a.bottleneck_links < b.bottleneck_links;
  return a.total_rtt_s < b.total_rtt_s;
}

Matrix BandwidthClasses(const Matrix& bw, double ratio) {
  const size_t n = bw.size();
  std::vector<double> values;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < bw[i].size(); ++j)
      if (i != j) values.push_back(bw[i][j]);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::vector<double> floor(values.size());  // class minimum of each distinct value
  for (size_t k = 0; k < values.size(); ++k) {
    const bool starts = k == 0 || floor[k - 1] <= 0 || values[k] > ratio * floor[k - 1];
    floor[k] = starts ? values[k] : floor[k - 1];
  }
  Matrix out = bw;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < out[i].size(); ++j) {
      if (i == j) continue;
      const size_t k = std::lower_bound(values.begin(), values.end(), bw[i][j]) - values.begin();
      out[i][j] = floor[k];
    }
  return out;
}

RingOrder EvaluateRingOrder(const Matrix& bw, const Matrix& rtt, const std::vector<int>& order) {
  RingOrder r;
  r.order = order;
  const size_t n = order.size();
  if (n <= 1) return r;
  r.bottleneck_bps = INFINITY;
  for (size_t i = 0; i < n; ++i) {
    int a = order[i], b = order[(i + 1) % n];
    r.bottleneck_bps = std::min(r.bottleneck_bps, bw[a][b]);
    r.total_rtt_s += rtt[a][b];
  }
  for (size_t i = 0; i < n; ++i) {
    r.bottleneck_links += bw[order[i]][order[(i + 1) % n]] == r.bottleneck_bps;
  }
  return r;
}

absl::StatusOr<RingOrder> ComputeRingOrderExact(const Matrix& bw, const Matrix& rtt) {
  if (absl::Status s = ValidateMatrices(bw, rtt); !s.ok()) return s;
  std::vector<int> order(bw.size());
  std::iota(order.begin(), order.end(), 0);
  RingOrder best = EvaluateRingOrder(bw, rtt, order);
  // next_permutation visits orders in lexicographic order, so keeping only strict
  // improvements keeps the lexicographically smallest among equals.
  while (std::next_permutation(order.begin() + 1, order.end())) {
    RingOrder c = EvaluateRingOrder(bw, rtt, order);
    if (Better(c, best)) best = std::move(c);
  }
  return best;
}

absl::StatusOr<RingOrder> ComputeRingOrder(const Matrix& bw, const Matrix& rtt) {
  if (absl::Status s = ValidateMatrices(bw, rtt); !s.ok()) return s;
  const int n = static_cast<int>(bw.size());
  if (n <= kRingOrderExactMaxPeers) return ComputeRingOrderExact(bw, rtt);
  std::vector<int> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  RingOrder best = LocalSearch(bw, rtt, EvaluateRingOrder(bw, rtt, identity));
  RingOrder bounded = LocalSearch(bw, rtt, EvaluateRingOrder(bw, rtt, HighBottleneckRing(bw)));
  if (Better(bounded, best)) best = std::move(bounded);
  // Greedy tours from the first few starts (bounded work: each local search is
  // O(N^3) per round), each improved by local search.
  for (int start = 0; start < std::min(n, 8); ++start) {
    RingOrder c = EvaluateRingOrder(bw, rtt, StartAtZero(GreedyFrom(bw, rtt, start)));
    c = LocalSearch(bw, rtt, c);
    if (Better(c, best)) best = std::move(c);
  }
  return best;
}

}  // namespace rt::collective
