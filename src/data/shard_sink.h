// The token stream of one split cut into fixed-size shard files: `<split>-00000.bin`,
// `<split>-00001.bin`, ... each exactly `shard_tokens` tokens except the last. Each
// shard is written atomically (TokenShardWriter). A chunk's source bytes and finished
// document are credited to the shard that holds its last token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "data/data_manifest.h"
#include "data/token_shard.h"

namespace rt::data {

class ShardSink {
 public:
  ShardSink(std::string dir, std::string split, int vocab_size, int token_bytes,
            uint64_t shard_tokens);
  // Appends tokens (of one text chunk) and credits the chunk's source bytes and, when
  // `ends_document`, one document.
  absl::Status Append(const uint32_t* tokens, size_t n, uint64_t source_bytes, bool ends_document);
  // Finishes the last shard and appends every shard's entry to *entries.
  absl::Status Finish(std::vector<ShardEntry>* entries);

  uint64_t tokens() const { return total_tokens_; }
  uint64_t source_bytes() const { return total_bytes_; }
  uint64_t documents() const { return total_docs_; }

 private:
  absl::Status FinishShard();
  std::string dir_, split_;
  int vocab_size_, token_bytes_;
  uint64_t shard_tokens_;
  std::optional<TokenShardWriter> writer_;
  ShardEntry current_;
  std::vector<ShardEntry> done_;
  uint64_t total_tokens_ = 0, total_bytes_ = 0, total_docs_ = 0;
};

}  // namespace rt::data
