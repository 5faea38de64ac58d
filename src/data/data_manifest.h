// The manifest of a prepared data directory (`manifest.txt`): what the directory
// holds, so that readers validate everything before training on it.
//
// Format: UTF-8 text, one record per line, fields separated by single spaces, '#'
// lines are comments. Lines, in this order:
//   format ringtrain-data 1                  format name and version
//   vocab_size 8192                          tokens are < vocab_size
//   token_bytes 2                            2 (uint16) or 4 (uint32) in every shard
//   eot_id 3                                 end-of-text token id, -1 if none
//   tokenizer tokenizer.model 1a2b3c4d       optional: file in the dir + its CRC32C (hex)
//   license CC BY-SA 3.0 (Wikipedia)         optional: the licence of the source text, as
//                                            given to `prepare --license` (the rest of the
//                                            line: printable UTF-8, no control characters)
//   shard SPLIT FILE TOKENS SOURCE_BYTES DOCUMENTS CRC      zero or more, in read order
//   end N CRC                                N = number of shard lines, CRC = CRC32C (hex)
//                                            of every byte before the "end" line
// SPLIT is "train" or "val"; FILE is a plain file name in the directory; TOKENS the
// shard's token count; SOURCE_BYTES the UTF-8 bytes of source text behind those
// tokens (for bits per byte); DOCUMENTS the documents in it; CRC the shard's
// payload_crc32c. The "end" line makes a truncated or edited manifest detectable.
// `prepare` writes the manifest last (atomically), so a directory without one is
// incomplete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::data {

inline constexpr char kManifestName[] = "manifest.txt";
inline constexpr int kManifestVersion = 1;

struct ShardEntry {
  std::string split;  // "train" | "val"
  std::string file;   // name inside the data dir
  uint64_t tokens = 0;
  uint64_t source_bytes = 0;
  uint64_t documents = 0;
  uint32_t crc = 0;  // payload_crc32c of the shard
  bool operator==(const ShardEntry& o) const;
};

struct DataManifest {
  int vocab_size = 0;
  int token_bytes = 2;
  int eot_id = -1;
  std::string tokenizer_file;  // "" = none
  uint32_t tokenizer_crc = 0;
  std::string license;  // "" = not recorded
  std::vector<ShardEntry> shards;

  std::string Serialize() const;
  // Parses and validates (fields, order, names, the end line). `path` names the file in
  // errors: "manifest /d/manifest.txt line 7: ...".
  static absl::StatusOr<DataManifest> Parse(absl::string_view text, const std::string& path);
};

// Writes dir/manifest.txt atomically (tmp + fsync + rename + dir fsync).
absl::Status WriteManifest(const std::string& dir, const DataManifest& manifest);
// Reads and parses dir/manifest.txt; *text (optional) receives the raw bytes.
absl::StatusOr<DataManifest> ReadManifest(const std::string& dir, std::string* text = nullptr);

// OK for a licence text a manifest can hold (1..1000 bytes, no control characters).
absl::Status CheckLicenseText(absl::string_view text);

// True for names `prepare` may use inside a data dir: [A-Za-z0-9._-]+, not starting with '.'.
bool IsPlainFileName(absl::string_view name);

}  // namespace rt::data
