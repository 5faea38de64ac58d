// Fuzzes the token shard validation (data/token_shard.h, what TokenShard::Open runs on
// the mapped file). Each input is tried as read and with both checksums made right,
// so that the fuzzer reaches the size and vocabulary checks. A valid shard's size must
// match its header exactly and every token must be inside the vocabulary.
#include <cstdint>
#include <vector>

#include "core/crc32c.h"
#include "data/token_shard.h"
#include "fuzz_check.h"

namespace {

using rt::data::kShardHeaderBytes;

void Check(absl::Span<const uint8_t> file) {
  auto header = rt::data::ValidateTokenShard(file, "fuzz.bin");
  if (!header.ok()) {
    rt::fuzz::CheckErrorCode(header.status(), {absl::StatusCode::kDataLoss});
    return;
  }
  const int width = header->token_bytes;
  FUZZ_CHECK(width == 2 || width == 4);
  FUZZ_CHECK(header->vocab_size > 0);
  FUZZ_CHECK(kShardHeaderBytes + header->token_count * width == file.size());
  for (uint64_t i = 0; i < header->token_count; ++i) {
    const uint8_t* p = file.data() + kShardHeaderBytes + i * width;
    const uint32_t token =
        width == 2 ? rt::fuzz::LoadLe<uint16_t>(p) : rt::fuzz::LoadLe<uint32_t>(p);
    FUZZ_CHECK(token < static_cast<uint32_t>(header->vocab_size));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> in(data, data + size);
  Check(in);
  if (size >= kShardHeaderBytes) {
    const uint8_t* payload = in.data() + kShardHeaderBytes;
    const uint32_t width = rt::fuzz::LoadLe<uint32_t>(in.data() + 12);
    const uint64_t count = rt::fuzz::LoadLe<uint64_t>(in.data() + 24);
    const uint64_t room = size - kShardHeaderBytes;
    const uint64_t n = (width == 2 || width == 4) && count <= room / width ? count * width : room;
    rt::fuzz::StoreLe<uint32_t>(in.data() + 32, rt::Crc32c(payload, n));
    rt::fuzz::StoreLe<uint32_t>(in.data() + 36, rt::Crc32c(in.data(), 36));
    Check(in);
  }
  return 0;
}
