// Fuzzes the link-matrix row decoder (collective/link_matrix.h), which reads the rows
// every peer sends after a bandwidth probe. Each input is decoded into a matrix
// shaped as the input itself claims (up to 64 peers, so that inputs get past the
// shape checks) and into a fixed 3-peer matrix. A decoded row must re-encode to the
// same bytes and hold finite, non-negative figures.
#include <cmath>
#include <cstdint>
#include <vector>

#include "collective/link_matrix.h"
#include "fuzz_check.h"

namespace {

rt::collective::LinkMatrix Shaped(std::vector<int> peers) {
  rt::collective::LinkMatrix m;
  const size_t n = peers.size();
  m.peers = std::move(peers);
  m.bandwidth_bps.assign(n, std::vector<double>(n, 0.0));
  m.rtt_s.assign(n, std::vector<double>(n, 0.0));
  return m;
}

void Check(absl::Span<const uint8_t> in, rt::collective::LinkMatrix m, int index) {
  const absl::Status st = rt::collective::DecodeLinkRow(in, index, "fuzz peer", &m);
  if (!st.ok()) {
    rt::fuzz::CheckErrorCode(st, {absl::StatusCode::kDataLoss});
    return;
  }
  FUZZ_CHECK(rt::fuzz::SameBytes(rt::collective::EncodeLinkRow(m, index), in));
  for (size_t j = 0; j < m.peers.size(); ++j) {
    for (double v : {m.bandwidth_bps[index][j], m.rtt_s[index][j]}) {
      FUZZ_CHECK(std::isfinite(v) && v >= 0);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> in(data, size);
  Check(in, Shaped({0, 1, 2}), 1);
  if (size < 16) return 0;
  const uint32_t n = rt::fuzz::LoadLe<uint32_t>(data + 12);
  const uint32_t index = rt::fuzz::LoadLe<uint32_t>(data + 8);
  if (n == 0 || n > 64 || index >= n) return 0;
  std::vector<int> peers(n);
  for (uint32_t j = 0; j < n; ++j) {
    peers[j] = 16 + 4 * (j + 1) <= size ? rt::fuzz::LoadLe<int32_t>(data + 16 + 4 * j)
                                        : static_cast<int>(j);
  }
  Check(in, Shaped(std::move(peers)), static_cast<int>(index));
  return 0;
}
