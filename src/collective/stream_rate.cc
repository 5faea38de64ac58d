// The link probe's rate estimator (stream_rate.h): upper hull, time-weighted median.
#include "collective/stream_rate.h"

#include <algorithm>
#include <utility>

namespace rt::collective {

double EnvelopeRate(absl::Span<const int64_t> arrival_ns, size_t first, uint64_t chunk_bytes) {
  constexpr double kMinSeconds = 1e-7;
  if (first + 1 >= arrival_ns.size()) return 0;  // fewer than 2 points: no rate
  const size_t n = arrival_ns.size() - first;
  const double chunk = static_cast<double>(chunk_bytes);
  const double total_s =
      static_cast<double>(arrival_ns.back() - arrival_ns[first]) * 1e-9;  // >= 0: nondecreasing
  if (total_s < kMinSeconds) return static_cast<double>(n - 1) * chunk / kMinSeconds;

  // Upper concave hull (monotone chain over increasing time). Of arrivals at the same
  // instant only the last (most bytes) can be a vertex; the chain's cross-product test
  // drops the others, since they lie straight below it.
  struct Point {
    double t, b;  // s since arrival `first`, bytes since then
  };
  std::vector<Point> hull;
  for (size_t i = 0; i < n; ++i) {
    const Point p{static_cast<double>(arrival_ns[first + i] - arrival_ns[first]) * 1e-9,
                  static_cast<double>(i) * chunk};
    while (!hull.empty() && hull.back().t >= p.t) hull.pop_back();  // same time, fewer bytes
    while (hull.size() >= 2) {
      const Point& a = hull[hull.size() - 2];
      const Point& b = hull.back();
      // b stays a vertex only if it lies strictly above the chord a -> p.
      if ((b.b - a.b) * (p.t - a.t) > (p.b - a.b) * (b.t - a.t)) break;
      hull.pop_back();
    }
    hull.push_back(p);
  }

  // (slope, time spanned) of each edge; the slope at which half the time is reached.
  std::vector<std::pair<double, double>> edges;
  for (size_t k = 1; k < hull.size(); ++k) {
    const double dt = hull[k].t - hull[k - 1].t;
    edges.emplace_back((hull[k].b - hull[k - 1].b) / dt, dt);
  }
  std::sort(edges.begin(), edges.end());
  double spanned = 0;
  for (const auto& [slope, dt] : edges) {
    spanned += dt;
    if (spanned >= 0.5 * total_s) return slope;
  }
  return edges.back().first;  // not reached: the spans sum to total_s
}

StreamRates ReadStreamRates(absl::Span<const int64_t> arrival_ns, uint64_t chunk_bytes) {
  StreamRates r;
  const size_t chunks = arrival_ns.size();
  if (chunks < 4) return r;
  // Counted from the arrival of the chunk before each part, as bytes received since then.
  const size_t window_first = chunks / 4 - 1;  // the chunk before the last three quarters
  const size_t half_first = chunks / 2 - 1;
  r.window_s =
      std::max(static_cast<double>(arrival_ns.back() - arrival_ns[window_first]) * 1e-9, 1e-7);
  r.window_bps = EnvelopeRate(arrival_ns, window_first, chunk_bytes);
  r.last_half_bps = EnvelopeRate(arrival_ns, half_first, chunk_bytes);
  return r;
}

double MedianOf(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 == 1 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

}  // namespace rt::collective
