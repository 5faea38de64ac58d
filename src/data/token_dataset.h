// A prepared data directory (`ringtrain prepare` output) seen as one token stream per
// split: manifest.txt (see data_manifest.h) + token shards (token_shard.h) + an
// optional tokenizer.model. Also WriteTokenDataset, a minimal writer for tests and
// synthetic data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/data_manifest.h"
#include "data/token_shard.h"

namespace rt::data {

// The tokens of one split, concatenated in manifest order. Cheap to copy (shards are
// shared mmaps); Read is thread-safe.
class TokenDataset {
 public:
  // Reads and validates the manifest and opens every shard of `split` ("train" | "val"),
  // checking each shard's own checksums and that its token count, vocab, width and crc
  // match the manifest; the tokenizer file (if listed) must exist with the listed crc.
  // A split without shards opens with num_tokens() == 0 (e.g. --val-fraction 0).
  static absl::StatusOr<TokenDataset> Open(const std::string& dir, absl::string_view split);

  uint64_t num_tokens() const { return starts_.empty() ? 0 : starts_.back(); }
  int vocab_size() const { return manifest_.vocab_size; }
  // UTF-8 bytes of source text behind this split's tokens (bits per byte =
  // loss_nats / ln 2 * num_tokens / source_bytes, over the whole split).
  uint64_t source_bytes() const { return source_bytes_; }
  uint64_t num_documents() const { return documents_; }
  int eot_id() const { return manifest_.eot_id; }  // -1 if none
  std::string tokenizer_path() const;              // "" if the directory has none
  // Stable hash (16 hex digits) of manifest.txt: same data (and tokenizer) => same string,
  // independent of the split opened.
  std::string fingerprint() const { return fingerprint_; }
  const std::string& dir() const { return dir_; }
  const std::string& split() const { return split_; }
  const DataManifest& manifest() const { return manifest_; }

  // Copies tokens [pos, pos + n) of the split into out[0, n), across shard boundaries.
  // Requires pos + n <= num_tokens() (a caller bug otherwise: aborts with a message).
  void Read(uint64_t pos, size_t n, int32_t* out) const;

 private:
  TokenDataset() = default;
  std::string dir_, split_, fingerprint_;
  DataManifest manifest_;
  std::vector<TokenShard> shards_;
  std::vector<uint64_t> starts_;  // starts_[i] = first token of shard i; back() = total
  uint64_t source_bytes_ = 0;
  uint64_t documents_ = 0;
};

// Minimal writer for tests and synthetic data: creates `dir` (and parents) holding
// train-00000.bin, val-00000.bin (one shard per split, possibly empty) and
// manifest.txt, with eot_id -1, no tokenizer, 0 documents. Tokens must be < vocab_size;
// the width is 2 bytes when vocab_size <= 65536, else 4.
absl::Status WriteTokenDataset(const std::string& dir, int vocab_size,
                               absl::Span<const uint32_t> train, absl::Span<const uint32_t> val,
                               uint64_t train_source_bytes, uint64_t val_source_bytes);

// 2 when every id < vocab_size fits uint16, else 4.
inline int TokenBytesForVocab(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

}  // namespace rt::data
