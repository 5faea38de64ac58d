// Fuzzes the data manifest parser (data/data_manifest.h). Each input is tried as read
// and with its "end" line rewritten to the right shard count and checksum, so that
// the fuzzer reaches the line checks before it. A parsed manifest must serialize to a
// text that parses to the same manifest, and serialize again to the same text.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/crc32c.h"
#include "data/data_manifest.h"
#include "fuzz_check.h"

namespace {

void Check(absl::string_view text) {
  auto m = rt::data::DataManifest::Parse(text, "fuzz/manifest.txt");
  if (!m.ok()) {
    rt::fuzz::CheckErrorCode(m.status(),
                             {absl::StatusCode::kDataLoss, absl::StatusCode::kInvalidArgument});
    return;
  }
  FUZZ_CHECK(m->token_bytes == 2 || m->token_bytes == 4);
  FUZZ_CHECK(m->vocab_size > 0);
  const std::string once = m->Serialize();
  auto again = rt::data::DataManifest::Parse(once, "fuzz/manifest.txt");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->vocab_size == m->vocab_size && again->token_bytes == m->token_bytes &&
             again->eot_id == m->eot_id && again->tokenizer_file == m->tokenizer_file &&
             again->tokenizer_crc == m->tokenizer_crc && again->license == m->license &&
             again->shards == m->shards);
  FUZZ_CHECK(again->Serialize() == once);
}

// The text up to its last "end" line (or all of it), closed by a correct end line.
std::string WithRightEndLine(absl::string_view text) {
  size_t cut = text.rfind("\nend ");
  std::string body(cut == absl::string_view::npos ? text : text.substr(0, cut + 1));
  if (!body.empty() && body.back() != '\n') body += '\n';
  int shards = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (absl::StartsWith(line, "shard ")) ++shards;
  }
  absl::StrAppend(&body, "end ", shards, " ",
                  absl::StrFormat("%08x", rt::Crc32c(body.data(), body.size())), "\n");
  return body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  Check(text);
  Check(WithRightEndLine(text));
  return 0;
}
