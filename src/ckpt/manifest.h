// Checkpoint manifest: the metadata types and the text codec of manifest.txt.
//
// The format itself (line syntax, escaping, the manifest's own crc) is documented in
// ckpt/checkpoint.h next to the writer; this file only encodes and strictly decodes
// it. Decoding never trusts its input: any deviation is a DataLoss error naming the
// file (`where`), the line number and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rt::ckpt {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr char kManifestFileName[] = "manifest.txt";
inline constexpr char kManifestMagic[] = "ringtrain-checkpoint";
// Manifests larger than this are rejected unread (they would be garbage).
inline constexpr size_t kMaxManifestBytes = 16u << 20;

struct CheckpointMeta {
  int64_t step = 0;                           // optimizer steps completed, >= 0
  uint64_t epoch = 0;                         // cluster view epoch of the writer
  std::map<std::string, std::string> fields;  // free-form (config, data cursor, RNG, ...)
};

// What the manifest says about one section (file <name>.bin).
struct SectionInfo {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// True if `name` is a valid section name: 1..128 bytes of [A-Za-z0-9_.-], not
// starting with '.', not "manifest".
bool IsValidSectionName(absl::string_view name);

// "step-00001234": the directory name of a checkpoint at `step` (>= 0).
std::string StepDirName(int64_t step);
// Parses "step-<digits>" (at least 8 digits, fits int64); false otherwise.
bool ParseStepDirName(absl::string_view name, int64_t* step);

// %XX-escaping of field keys and values (see checkpoint.h).
std::string EscapeManifestToken(absl::string_view raw);
// Strict inverse: bytes outside 0x21..0x7E or a bad %XX are InvalidArgument.
absl::StatusOr<std::string> UnescapeManifestToken(absl::string_view token);

// The complete manifest text, ending with the manifest-crc32c line. Callers validate
// section names and field keys first (EncodeManifest does not fail).
std::string EncodeManifest(const CheckpointMeta& meta, const std::vector<SectionInfo>& sections);
// Parses and validates `text` (magic, version, order, syntax, uniqueness, crc).
// `where` names the file in error messages. Errors are DataLoss.
absl::Status DecodeManifest(absl::string_view text, absl::string_view where, CheckpointMeta* meta,
                            std::vector<SectionInfo>* sections);

}  // namespace rt::ckpt
