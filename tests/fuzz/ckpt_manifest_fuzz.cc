// Fuzzes the checkpoint manifest decoder (ckpt/manifest.h) and its token codecs. Each
// input is tried as read and with its manifest-crc32c line rewritten to the right
// checksum, so that the fuzzer reaches the line checks before it. A decoded manifest
// must encode to a text that decodes to the same metadata and sections, and encode
// again to the same text; unescaping and step directory names round-trip.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "ckpt/manifest.h"
#include "core/crc32c.h"
#include "fuzz_check.h"

namespace {

bool SameSections(const std::vector<rt::ckpt::SectionInfo>& a,
                  const std::vector<rt::ckpt::SectionInfo>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].bytes != b[i].bytes || a[i].crc32c != b[i].crc32c) {
      return false;
    }
  }
  return true;
}

void Check(absl::string_view text) {
  rt::ckpt::CheckpointMeta meta;
  std::vector<rt::ckpt::SectionInfo> sections;
  const absl::Status st = rt::ckpt::DecodeManifest(text, "fuzz/manifest.txt", &meta, &sections);
  if (!st.ok()) {
    rt::fuzz::CheckErrorCode(st, {absl::StatusCode::kDataLoss});
    return;
  }
  FUZZ_CHECK(meta.step >= 0);
  for (const auto& s : sections) FUZZ_CHECK(rt::ckpt::IsValidSectionName(s.name));
  const std::string once = rt::ckpt::EncodeManifest(meta, sections);
  rt::ckpt::CheckpointMeta meta2;
  std::vector<rt::ckpt::SectionInfo> sections2;
  FUZZ_CHECK(rt::ckpt::DecodeManifest(once, "again", &meta2, &sections2).ok());
  FUZZ_CHECK(meta2.step == meta.step && meta2.epoch == meta.epoch && meta2.fields == meta.fields);
  FUZZ_CHECK(SameSections(sections, sections2));
  FUZZ_CHECK(rt::ckpt::EncodeManifest(meta2, sections2) == once);
}

// The text up to its last manifest-crc32c line (or all of it), closed by a right one.
std::string WithRightCrcLine(absl::string_view text) {
  const size_t cut = text.rfind("manifest-crc32c ");
  std::string body(cut == absl::string_view::npos ? text : text.substr(0, cut));
  if (!body.empty() && body.back() != '\n') body += '\n';
  absl::StrAppend(&body, "manifest-crc32c ",
                  absl::StrFormat("%08x", rt::Crc32c(body.data(), body.size())), "\n");
  return body;
}

void CheckTokens(absl::string_view text) {
  for (absl::string_view token : absl::StrSplit(text, absl::ByAnyChar(" \n"))) {
    if (auto raw = rt::ckpt::UnescapeManifestToken(token); raw.ok()) {
      const std::string escaped = rt::ckpt::EscapeManifestToken(*raw);
      for (char c : escaped) FUZZ_CHECK(c >= 0x21 && c <= 0x7e);
      auto back = rt::ckpt::UnescapeManifestToken(escaped);
      FUZZ_CHECK(back.ok() && *back == *raw);
    } else {
      rt::fuzz::CheckErrorCode(raw.status(), {absl::StatusCode::kInvalidArgument});
    }
    int64_t step = -1;
    if (rt::ckpt::ParseStepDirName(token, &step)) {
      FUZZ_CHECK(step >= 0);
      int64_t again = -1;
      FUZZ_CHECK(rt::ckpt::ParseStepDirName(rt::ckpt::StepDirName(step), &again) && again == step);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  Check(text);
  Check(WithRightCrcLine(text));
  CheckTokens(text);
  return 0;
}
