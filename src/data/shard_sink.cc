// Implementation of ShardSink (see shard_sink.h).
#include "data/shard_sink.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "core/status_macros.h"

namespace rt::data {

ShardSink::ShardSink(std::string dir, std::string split, int vocab_size, int token_bytes,
                     uint64_t shard_tokens)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      vocab_size_(vocab_size),
      token_bytes_(token_bytes),
      shard_tokens_(std::max<uint64_t>(1, shard_tokens)) {}

absl::Status ShardSink::FinishShard() {
  RETURN_IF_ERROR(writer_->Finish());
  current_.tokens = writer_->tokens_written();
  current_.crc = writer_->payload_crc();
  done_.push_back(current_);
  writer_.reset();
  return absl::OkStatus();
}

absl::Status ShardSink::Append(const uint32_t* tokens, size_t n, uint64_t source_bytes,
                               bool ends_document) {
  while (n > 0) {
    if (writer_ && writer_->tokens_written() == shard_tokens_) RETURN_IF_ERROR(FinishShard());
    if (!writer_) {
      current_ = ShardEntry();
      current_.split = split_;
      current_.file = absl::StrFormat("%s-%05d.bin", split_, done_.size());
      ASSIGN_OR_RETURN(TokenShardWriter w, TokenShardWriter::Create(dir_ + "/" + current_.file,
                                                                    vocab_size_, token_bytes_));
      writer_.emplace(std::move(w));
    }
    const size_t take =
        static_cast<size_t>(std::min<uint64_t>(n, shard_tokens_ - writer_->tokens_written()));
    RETURN_IF_ERROR(writer_->Append(absl::MakeConstSpan(tokens, take)));
    tokens += take;
    n -= take;
    total_tokens_ += take;
  }
  current_.source_bytes += source_bytes;
  total_bytes_ += source_bytes;
  if (ends_document) {
    current_.documents++;
    total_docs_++;
  }
  return absl::OkStatus();
}

absl::Status ShardSink::Finish(std::vector<ShardEntry>* entries) {
  if (writer_) RETURN_IF_ERROR(FinishShard());
  entries->insert(entries->end(), done_.begin(), done_.end());
  return absl::OkStatus();
}

}  // namespace rt::data
