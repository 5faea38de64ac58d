// LinkMatrix rows on the wire, and the ring order (with its log line) from a matrix.
#include "collective/link_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace rt::collective {
namespace {

constexpr char kRowMagic[4] = {'R', 'T', 'L', 'R'};
constexpr uint32_t kRowVersion = 1;

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (DESIGN)
  out->insert(out->end(), b, b + sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string FormatRate(double bps) {
  if (bps >= 1e9) return absl::StrFormat("%.2f GB/s", bps / 1e9);
  if (bps >= 1e6) return absl::StrFormat("%.0f MB/s", bps / 1e6);
  return absl::StrFormat("%.1f kB/s", bps / 1e3);
}

}  // namespace

int LinkMatrix::IndexOf(int host_rank) const {
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] == host_rank) return static_cast<int>(i);
  }
  return -1;
}

bool LinkMatrix::BitwiseEquals(const LinkMatrix& o) const {
  if (peers != o.peers || bandwidth_bps.size() != o.bandwidth_bps.size() ||
      rtt_s.size() != o.rtt_s.size()) {
    return false;
  }
  auto same = [](const std::vector<std::vector<double>>& a,
                 const std::vector<std::vector<double>>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].size() != b[i].size() ||
          std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0) {
        return false;
      }
    }
    return true;
  };
  return same(bandwidth_bps, o.bandwidth_bps) && same(rtt_s, o.rtt_s);
}

std::vector<uint8_t> EncodeLinkRow(const LinkMatrix& m, int index) {
  const int n = m.size();
  std::vector<uint8_t> out(kRowMagic, kRowMagic + 4);
  Put<uint32_t>(&out, kRowVersion);
  Put<uint32_t>(&out, static_cast<uint32_t>(index));
  Put<uint32_t>(&out, static_cast<uint32_t>(n));
  for (int p : m.peers) Put<int32_t>(&out, p);
  for (int j = 0; j < n; ++j) Put<double>(&out, m.bandwidth_bps[index][j]);
  for (int j = 0; j < n; ++j) Put<double>(&out, m.rtt_s[index][j]);
  return out;
}

absl::Status DecodeLinkRow(absl::Span<const uint8_t> bytes, int expected_index,
                           const std::string& from, LinkMatrix* m) {
  const size_t n = m->peers.size();
  const size_t want = 16 + n * 4 + n * 16;
  if (bytes.size() != want) {
    return absl::DataLossError(absl::StrFormat(
        "link matrix row from %s has %d bytes, expected %d for %d peers (do all peers "
        "probe the same peer set?)",
        from, bytes.size(), want, n));
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kRowMagic, 4) != 0 || Get<uint32_t>(p + 4) != kRowVersion) {
    return absl::DataLossError(
        absl::StrFormat("link matrix row from %s: bad magic or version", from));
  }
  const uint32_t index = Get<uint32_t>(p + 8);
  if (index != static_cast<uint32_t>(expected_index) || Get<uint32_t>(p + 12) != n) {
    return absl::DataLossError(
        absl::StrFormat("link matrix row from %s claims row %d of %d, expected row %d of %d", from,
                        index, Get<uint32_t>(p + 12), expected_index, n));
  }
  p += 16;
  for (size_t j = 0; j < n; ++j, p += 4) {
    if (Get<int32_t>(p) != m->peers[j]) {
      return absl::DataLossError(
          absl::StrFormat("link matrix row from %s lists peer %d at position %d, expected %d", from,
                          Get<int32_t>(p), j, m->peers[j]));
    }
  }
  for (int which = 0; which < 2; ++which) {
    auto& row = which == 0 ? m->bandwidth_bps[index] : m->rtt_s[index];
    for (size_t j = 0; j < n; ++j, p += 8) {
      const double v = Get<double>(p);
      if (!std::isfinite(v) || v < 0) {
        return absl::DataLossError(absl::StrFormat("link matrix row from %s: %s to peer %d is %g",
                                                   from, which == 0 ? "bandwidth" : "rtt",
                                                   m->peers[j], v));
      }
      row[j] = v;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RingPlan> PlanRingOrder(const LinkMatrix& m) {
  ASSIGN_OR_RETURN(RingOrder order, ComputeRingOrder(BandwidthClasses(m.bandwidth_bps), m.rtt_s));
  RingPlan plan;
  for (int i : order.order) plan.host_order.push_back(m.peers[i]);
  plan.bottleneck_bps = SummarizeRing(m, plan.host_order).bottleneck_bps;
  plan.total_rtt_s = order.total_rtt_s;
  plan.classed = std::move(order);
  plan.description = DescribeRing(m, plan.host_order);
  return plan;
}

RingOrder ClassedRingOrder(const LinkMatrix& m, const std::vector<int>& host_order) {
  std::vector<int> index;
  for (int r : host_order) index.push_back(std::max(0, m.IndexOf(r)));
  return EvaluateRingOrder(BandwidthClasses(m.bandwidth_bps), m.rtt_s, index);
}

std::string DescribeRing(const LinkMatrix& m, const std::vector<int>& host_order) {
  const size_t n = host_order.size();
  if (n < 2) return absl::StrFormat("ring order %s: alone", absl::StrJoin(host_order, ""));
  std::vector<std::string> speeds;
  double bottleneck = 0, rtt_sum = 0;
  for (size_t k = 0; k < n; ++k) {
    const int a = m.IndexOf(host_order[k]), b = m.IndexOf(host_order[(k + 1) % n]);
    if (a < 0 || b < 0) return "ring order: a peer is missing from the link matrix";
    const double bw = m.bandwidth_bps[a][b];
    speeds.push_back(FormatRate(bw));
    bottleneck = k == 0 ? bw : std::min(bottleneck, bw);
    rtt_sum += m.rtt_s[a][b];
  }
  return absl::StrFormat("ring order %s -> %d: %s; bottleneck %s, rtt sum %.3f ms",
                         absl::StrJoin(host_order, " -> "), host_order[0],
                         absl::StrJoin(speeds, ", "), FormatRate(bottleneck), rtt_sum * 1e3);
}

std::vector<std::string> DescribeLinkMatrix(const LinkMatrix& m) {
  std::vector<std::string> lines;
  for (int i = 0; i < m.size(); ++i) {
    std::vector<std::string> links;
    for (int j = 0; j < m.size(); ++j) {
      if (i == j) continue;
      links.push_back(absl::StrFormat("->%d %s %.3f ms", m.peers[j],
                                      FormatRate(m.bandwidth_bps[i][j]), m.rtt_s[i][j] * 1e3));
    }
    lines.push_back(absl::StrFormat("links from %d: %s", m.peers[i], absl::StrJoin(links, ", ")));
  }
  return lines;
}

RingLinkSummary SummarizeRing(const LinkMatrix& m, const std::vector<int>& host_order) {
  RingLinkSummary s;
  const size_t n = host_order.size();
  for (size_t k = 0; k < n && n > 1; ++k) {
    const int a = m.IndexOf(host_order[k]), b = m.IndexOf(host_order[(k + 1) % n]);
    if (a < 0 || b < 0) continue;
    const double bw = m.bandwidth_bps[a][b];
    s.bottleneck_bps = k == 0 ? bw : std::min(s.bottleneck_bps, bw);
    s.max_rtt_s = std::max(s.max_rtt_s, m.rtt_s[a][b]);
  }
  return s;
}

}  // namespace rt::collective
