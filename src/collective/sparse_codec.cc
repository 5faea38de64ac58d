// Sparse gradient encoding: block bit-packed index gaps, split-plane bf16, optional zstd.
#include "collective/sparse_codec.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace rt::collective {
namespace {

constexpr uint8_t kMagic[4] = {'R', 'T', 'S', 'P'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kFlagZstd = 1;
constexpr size_t kHeaderBytes = 20;
constexpr size_t kBlock = 128;

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
int BitWidth(uint32_t x) { return x == 0 ? 0 : 32 - __builtin_clz(x); }

size_t PackedBlockBytes(size_t gaps, int width) { return (gaps * width + 7) / 8; }

// Payload without header: widths, packed gaps, value planes.
void EncodePayload(const SparseVector& v, std::vector<uint8_t>* payload) {
  const size_t count = v.indices.size();
  const size_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<uint32_t> gaps(count);
  for (size_t j = 0; j < count; ++j)
    gaps[j] = j == 0 ? v.indices[0] : v.indices[j] - v.indices[j - 1] - 1;
  std::vector<uint8_t> widths(blocks);
  size_t packed = 0;
  for (size_t b = 0; b < blocks; ++b) {
    uint32_t all = 0;
    const size_t e = std::min(count, (b + 1) * kBlock);
    for (size_t j = b * kBlock; j < e; ++j) all |= gaps[j];
    widths[b] = static_cast<uint8_t>(BitWidth(all));
    packed += PackedBlockBytes(e - b * kBlock, widths[b]);
  }
  payload->assign(blocks + packed + 2 * count, 0);
  uint8_t* p = payload->data();
  if (blocks > 0) std::memcpy(p, widths.data(), blocks);
  p += blocks;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t e = std::min(count, (b + 1) * kBlock);
    const int w = widths[b];
    uint64_t acc = 0;
    int bits = 0;
    for (size_t j = b * kBlock; j < e; ++j) {
      acc |= static_cast<uint64_t>(gaps[j]) << bits;
      bits += w;
      while (bits >= 8) {
        *p++ = static_cast<uint8_t>(acc);
        acc >>= 8;
        bits -= 8;
      }
    }
    if (bits > 0) *p++ = static_cast<uint8_t>(acc);
  }
  for (size_t j = 0; j < count; ++j) {
    p[j] = static_cast<uint8_t>(v.values[j]);
    p[count + j] = static_cast<uint8_t>(v.values[j] >> 8);
  }
}

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError("sparse gradient message: " + what);
}

}  // namespace

void EncodeSparse(const SparseVector& v, uint32_t length, int zstd_level,
                  std::vector<uint8_t>* out) {
  std::vector<uint8_t> payload;
  EncodePayload(v, &payload);
  uint8_t flags = 0;
  out->resize(kHeaderBytes);
  if (zstd_level > 0 && !payload.empty()) {
    out->resize(kHeaderBytes + ZSTD_compressBound(payload.size()));
    const size_t z = ZSTD_compress(out->data() + kHeaderBytes, out->size() - kHeaderBytes,
                                   payload.data(), payload.size(), zstd_level);
    if (!ZSTD_isError(z) && z < payload.size()) {
      flags = kFlagZstd;
      out->resize(kHeaderBytes + z);
    }
  }
  if (!(flags & kFlagZstd)) {
    out->resize(kHeaderBytes);
    out->insert(out->end(), payload.begin(), payload.end());
  }
  uint8_t* h = out->data();
  std::memcpy(h, kMagic, 4);
  h[4] = kVersion;
  h[5] = flags;
  h[6] = h[7] = 0;
  PutU32(h + 8, length);
  PutU32(h + 12, static_cast<uint32_t>(v.indices.size()));
  PutU32(h + 16, static_cast<uint32_t>(payload.size()));
}

absl::Status DecodeSparse(absl::Span<const uint8_t> bytes, uint32_t expected_length,
                          SparseVector* out) {
  if (bytes.size() < kHeaderBytes) {
    return Corrupt(
        absl::StrFormat("%d bytes is shorter than the %d-byte header", bytes.size(), kHeaderBytes));
  }
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, kMagic, 4) != 0) return Corrupt("bad magic (not RTSP)");
  if (h[4] != kVersion) return Corrupt(absl::StrFormat("unknown version %d", h[4]));
  const uint8_t flags = h[5];
  if ((flags & ~kFlagZstd) != 0 || h[6] != 0 || h[7] != 0) {
    return Corrupt(absl::StrFormat("unknown flags 0x%02x", flags));
  }
  const uint32_t length = GetU32(h + 8), count = GetU32(h + 12), payload_bytes = GetU32(h + 16);
  if (length != expected_length) {
    return Corrupt(
        absl::StrFormat("for a bucket of %d floats, expected %d", length, expected_length));
  }
  if (count > length) {
    return Corrupt(absl::StrFormat("%d entries in a bucket of %d floats", count, length));
  }
  const size_t blocks = (size_t{count} + kBlock - 1) / kBlock;
  // Smallest possible payload: widths + values (gaps may pack to 0 bits).
  if (payload_bytes < blocks + 2 * size_t{count} ||
      payload_bytes > blocks + 4 * size_t{count} + blocks + 2 * size_t{count}) {
    return Corrupt(
        absl::StrFormat("payload of %d bytes cannot hold %d entries", payload_bytes, count));
  }
  std::vector<uint8_t> inflated;
  absl::Span<const uint8_t> payload = bytes.subspan(kHeaderBytes);
  if (flags & kFlagZstd) {
    const unsigned long long size = ZSTD_getFrameContentSize(payload.data(), payload.size());
    if (size != payload_bytes) return Corrupt("zstd frame size does not match the header");
    inflated.resize(payload_bytes);
    const size_t z =
        ZSTD_decompress(inflated.data(), inflated.size(), payload.data(), payload.size());
    if (ZSTD_isError(z) || z != payload_bytes) {
      return Corrupt(absl::StrFormat("zstd: %s", ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short"));
    }
    payload = inflated;
  } else if (payload.size() != payload_bytes) {
    return Corrupt(
        absl::StrFormat("payload is %d bytes, header says %d", payload.size(), payload_bytes));
  }

  const uint8_t* widths = payload.data();
  size_t packed = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (widths[b] > 32) return Corrupt(absl::StrFormat("gap width %d > 32", widths[b]));
    packed += PackedBlockBytes(std::min<size_t>(kBlock, count - b * kBlock), widths[b]);
  }
  if (blocks + packed + 2 * size_t{count} != payload_bytes) {
    return Corrupt("payload size does not match its gap widths");
  }
  out->indices.resize(count);
  out->values.resize(count);
  const uint8_t* p = widths + blocks;
  uint64_t next = 0;  // smallest index the next entry may have
  for (size_t b = 0; b < blocks; ++b) {
    const size_t e = std::min<size_t>(count, (b + 1) * kBlock);
    const int w = widths[b];
    const uint64_t mask = w == 32 ? 0xffffffffull : ((uint64_t{1} << w) - 1);
    uint64_t acc = 0;
    int bits = 0;
    for (size_t j = b * kBlock; j < e; ++j) {
      while (bits < w) {
        acc |= static_cast<uint64_t>(*p++) << bits;
        bits += 8;
      }
      const uint64_t index = next + (acc & mask);
      acc >>= w;
      bits -= w;
      if (index >= length) {
        return Corrupt(
            absl::StrFormat("index %d is outside the bucket of %d floats", index, length));
      }
      out->indices[j] = static_cast<uint32_t>(index);
      next = index + 1;
    }
  }
  for (size_t j = 0; j < count; ++j) {
    out->values[j] = static_cast<bf16_t>(p[j] | (static_cast<uint16_t>(p[count + j]) << 8));
  }
  return absl::OkStatus();
}

}  // namespace rt::collective
