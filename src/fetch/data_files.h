// The files a data manifest lists, their expected sizes, and the check of a whole file
// against the manifest (what a fetched file must pass before it is kept, and what a
// serving peer checks before it sends a file it did not fetch itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/data_manifest.h"

namespace rt::fetch {

struct DataFile {
  std::string name;   // plain name inside the data directory
  uint64_t size = 0;  // exact size in bytes; 0 = not known from the manifest (the tokenizer)
};

// Tokenizer (if any) first, then the shards in manifest order. Shard sizes follow from
// the manifest: 64-byte header + tokens * token_bytes.
std::vector<DataFile> ManifestFiles(const data::DataManifest& manifest);
// The entry of `name`, or nullptr if the manifest does not list it.
const DataFile* FindFile(const std::vector<DataFile>& files, const std::string& name);

// Upper bound on a file whose size the manifest does not give (the tokenizer).
inline constexpr uint64_t kMaxUnlistedSizeBytes = uint64_t{1} << 30;

// Checks the file at `path` as manifest file `name`: a shard must validate
// (data/token_shard.h: header, size, payload checksum, token range) and agree with its
// manifest line (tokens, vocab, width, checksum); the tokenizer's CRC32C must match.
// DataLoss naming the file and what differs ("train-00001.bin: payload checksum
// 1a2b3c4d, the manifest says 5e6f7a8b").
absl::Status VerifyDataFile(const data::DataManifest& manifest, const std::string& name,
                            const std::string& path);

}  // namespace rt::fetch
