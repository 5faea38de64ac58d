// Fuzzes the state-transfer message decoders (cluster/state_messages.h): request,
// manifest, chunk header and acknowledgement, each as it arrives from a peer. Every
// decoder sees every input; a decoded message must re-encode to the same bytes and a
// manifest must stay within the byte limit it was decoded under.
#include <cstdint>
#include <set>
#include <vector>

#include "cluster/state_messages.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rt::fuzz::SameBytes;
  const absl::Span<const uint8_t> in(data, size);
  const std::string where = "fuzz transfer";
  const auto data_loss = {absl::StatusCode::kDataLoss};

  if (auto m = rt::cluster::DecodeStateRequest(in, where); m.ok()) {
    FUZZ_CHECK(SameBytes(rt::cluster::EncodeStateRequest(*m), in));
  } else {
    rt::fuzz::CheckErrorCode(m.status(), data_loss);
  }

  constexpr uint64_t kLimit = 1ull << 30;
  if (auto m = rt::cluster::DecodeStateManifest(in, kLimit, where); m.ok()) {
    FUZZ_CHECK(SameBytes(rt::cluster::EncodeStateManifest(*m), in));
    FUZZ_CHECK(m->reason.size() <= rt::cluster::kMaxStateReason);
    if (m->ok) FUZZ_CHECK(m->chunk_bytes > 0);
    FUZZ_CHECK(m->sections.size() <= rt::cluster::kMaxStateSections);
    uint64_t total = 0;
    std::set<std::string> names;
    for (const auto& s : m->sections) {
      FUZZ_CHECK(!s.name.empty() && s.name.size() <= rt::cluster::kMaxStateSectionName);
      FUZZ_CHECK(names.insert(s.name).second);
      total += s.bytes;
      FUZZ_CHECK(total <= kLimit);
    }
  } else {
    rt::fuzz::CheckErrorCode(m.status(),
                             {absl::StatusCode::kDataLoss, absl::StatusCode::kResourceExhausted});
  }

  if (auto m = rt::cluster::DecodeStateChunkHeader(in, where); m.ok()) {
    FUZZ_CHECK(SameBytes(rt::cluster::EncodeStateChunkHeader(*m), in));
  } else {
    rt::fuzz::CheckErrorCode(m.status(), data_loss);
  }

  if (auto m = rt::cluster::DecodeStateAck(in, where); m.ok()) {
    FUZZ_CHECK(SameBytes(rt::cluster::EncodeStateAck(*m), in));
  } else {
    rt::fuzz::CheckErrorCode(m.status(), data_loss);
  }
  return 0;
}
