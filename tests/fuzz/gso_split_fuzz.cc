// Fuzzes the test bed relay's GSO packet parser (tools/netem/gso_split.h): the relay
// reads these bytes (virtio_net_hdr + Ethernet frame) from the peers' kernels. For any
// input, GsoSegments counts at least one and at most one segment per payload byte;
// SplitTcp4Gso either refuses or cuts the packet into exactly that many wire segments
// (keep all), each a complete TCP/IPv4 packet: no GSO, an IPv4 total length that is the
// packet's, valid IPv4 and TCP checksums, sequence numbers that advance by the payload
// before them, at most gso_size payload bytes, and together the original payload. With
// a keep mask taken from the input, it returns the kept segments of the full split.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "netem/gso_split.h"

namespace {

using netem::kVnetHdrBytes;

uint16_t Load16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Load32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Checks one output segment; returns its TCP payload.
std::vector<uint8_t> CheckSegment(const std::vector<uint8_t>& seg, size_t gso_size) {
  FUZZ_CHECK(seg.size() > kVnetHdrBytes + 14 + 20 + 20);
  for (size_t i = 0; i < kVnetHdrBytes; ++i) FUZZ_CHECK(seg[i] == 0);  // no GSO, csum done
  const uint8_t* eth = seg.data() + kVnetHdrBytes;
  const size_t frame = seg.size() - kVnetHdrBytes;
  FUZZ_CHECK(Load16(eth + 12) == 0x0800);
  const uint8_t* ip = eth + 14;
  const size_t ihl = static_cast<size_t>(ip[0] & 0x0f) * 4;
  FUZZ_CHECK(Load16(ip + 2) == frame - 14);                   // total length
  FUZZ_CHECK(netem::Fold(netem::SumBytes(ip, ihl, 0)) == 0);  // header checksum
  const uint8_t* tcp = ip + ihl;
  const size_t tcp_bytes = frame - 14 - ihl;
  const size_t thl = static_cast<size_t>(tcp[12] >> 4) * 4;
  FUZZ_CHECK(tcp_bytes > thl && tcp_bytes - thl <= gso_size);
  uint32_t sum = netem::SumBytes(ip + 12, 8, 0) + IPPROTO_TCP + static_cast<uint32_t>(tcp_bytes);
  FUZZ_CHECK(netem::Fold(netem::SumBytes(tcp, tcp_bytes, sum)) == 0);  // TCP checksum
  return std::vector<uint8_t>(tcp + thl, tcp + tcp_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first input byte seeds the keep mask; the rest is the packet.
  if (size < 1) return 0;
  const uint8_t mask_seed = data[0];
  const uint8_t* p = data + 1;
  const size_t len = size - 1;
  const size_t n = netem::GsoSegments(p, len);
  FUZZ_CHECK(n >= 1 && n <= std::max<size_t>(1, len));

  std::vector<bool> keep(n, true);
  std::vector<std::vector<uint8_t>> all;
  if (!netem::SplitTcp4Gso(p, len, keep, &all)) {
    FUZZ_CHECK(all.empty());
    return 0;
  }
  FUZZ_CHECK(all.size() == n);
  uint16_t gso_size;
  memcpy(&gso_size, p + 4, 2);
  const uint8_t* ip = p + kVnetHdrBytes + 14;
  const uint8_t* tcp = ip + static_cast<size_t>(ip[0] & 0x0f) * 4;
  const size_t headers = 14 + static_cast<size_t>(ip[0] & 0x0f) * 4 + (tcp[12] >> 4) * 4;
  const uint8_t* payload = p + kVnetHdrBytes + headers;
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<uint8_t> bytes = CheckSegment(all[i], gso_size);
    FUZZ_CHECK(memcmp(bytes.data(), payload + offset, bytes.size()) == 0);
    const uint8_t* stcp = all[i].data() + kVnetHdrBytes + (tcp - (p + kVnetHdrBytes));
    FUZZ_CHECK(Load32(stcp + 4) == Load32(tcp + 4) + static_cast<uint32_t>(offset));
    offset += bytes.size();
  }
  FUZZ_CHECK(offset == len - kVnetHdrBytes - headers);

  // A keep mask from the first byte: the kept segments, in order, byte for byte.
  for (size_t i = 0; i < n; ++i) keep[i] = (mask_seed >> (i % 8)) & 1;
  std::vector<std::vector<uint8_t>> kept;
  FUZZ_CHECK(netem::SplitTcp4Gso(p, len, keep, &kept));
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    FUZZ_CHECK(k < kept.size() && kept[k] == all[i]);
    ++k;
  }
  FUZZ_CHECK(k == kept.size());
  // A mask of the wrong length is refused.
  keep.push_back(true);
  std::vector<std::vector<uint8_t>> none;
  FUZZ_CHECK(!netem::SplitTcp4Gso(p, len, keep, &none) && none.empty());
  return 0;
}
