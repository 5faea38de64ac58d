// ParamHash: fixed-size blocks hashed in parallel, block hashes combined in order.
#include "train/param_hash.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "data/batch_sampler.h"

namespace rt::train {
namespace {

constexpr size_t kBlockFloats = 1 << 16;

// Four independent multiply-rotate lanes over 32-bit words keep the loop fast; the
// final SplitMix rounds give avalanche.
uint64_t HashBlock(const float* x, size_t n, uint64_t block_index) {
  uint64_t lanes[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                       0x082EFA98EC4E6C89ull};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int l = 0; l < 4; ++l) {
      uint32_t w;
      std::memcpy(&w, &x[i + l], 4);
      uint64_t v = (lanes[l] ^ w) * 0x9E3779B97F4A7C15ull;
      lanes[l] = (v << 31) | (v >> 33);
    }
  }
  uint64_t h = data::SplitMix64(block_index ^ n);
  for (; i < n; ++i) {
    uint32_t w;
    std::memcpy(&w, &x[i], 4);
    h = data::SplitMix64(h ^ w);
  }
  for (uint64_t lane : lanes) h = data::SplitMix64(h ^ lane);
  return h;
}

}  // namespace

uint64_t ParamHash(absl::Span<const float> params) {
  const size_t n = params.size();
  const long blocks = static_cast<long>((n + kBlockFloats - 1) / kBlockFloats);
  std::vector<uint64_t> block_hashes(blocks);
  const float* data = params.data();
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const size_t begin = static_cast<size_t>(b) * kBlockFloats;
    const size_t count = begin + kBlockFloats <= n ? kBlockFloats : n - begin;
    block_hashes[b] = HashBlock(data + begin, count, static_cast<uint64_t>(b));
  }
  uint64_t h = data::SplitMix64(n);
  for (uint64_t bh : block_hashes) h = data::SplitMix64(h ^ bh);
  return h;
}

std::string ParamHashHex(uint64_t hash) { return absl::StrFormat("%016x", hash); }

}  // namespace rt::train
