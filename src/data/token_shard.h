// Token shard files: one file of little-endian token ids with a checksummed header,
// written once (TokenShardWriter) and read with mmap (TokenShard).
//
// Layout (all little-endian), 64-byte header then the payload:
//   offset  0  magic "RTTOKEN1"                 8 bytes
//   offset  8  version u32                      = 1
//   offset 12  token_bytes u32                  2 (uint16 tokens) or 4 (uint32 tokens)
//   offset 16  vocab_size u32                   every token is < vocab_size
//   offset 20  reserved u32                     = 0
//   offset 24  token_count u64
//   offset 32  payload_crc32c u32               CRC32C of the payload bytes
//   offset 36  header_crc32c u32                CRC32C of header bytes [0, 36)
//   offset 40  24 zero bytes                    (reserved)
//   offset 64  token_count * token_bytes bytes of tokens
// The file size must be exactly 64 + token_count * token_bytes: a truncated or
// extended shard is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rt::data {

inline constexpr char kShardMagic[8] = {'R', 'T', 'T', 'O', 'K', 'E', 'N', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

// What the header of a validated shard says.
struct TokenShardHeader {
  uint64_t token_count = 0;
  int vocab_size = 0;
  int token_bytes = 0;
  uint32_t payload_crc = 0;
};

// Validates the bytes of a whole shard file (what TokenShard::Open maps): magic,
// version, token width, reserved bytes, header crc, size, payload crc and that every
// token is < vocab_size. DataLoss errors name `path` and what is wrong ("... is
// truncated: header says 1000 tokens (2064 bytes), file has 1500 bytes").
absl::StatusOr<TokenShardHeader> ValidateTokenShard(absl::Span<const uint8_t> file,
                                                    const std::string& path);

// A validated, read-only, memory-mapped shard. Cheap to copy (the mapping is shared)
// and thread-safe to read concurrently.
class TokenShard {
 public:
  // Maps `path` and validates it with ValidateTokenShard.
  static absl::StatusOr<TokenShard> Open(const std::string& path);

  uint64_t size() const { return token_count_; }  // tokens in the shard
  int vocab_size() const { return vocab_size_; }
  int token_bytes() const { return token_bytes_; }
  uint32_t payload_crc() const { return payload_crc_; }
  const std::string& path() const { return path_; }

  // Copies tokens [begin, begin + n) into out[0, n) as int32. Requires
  // begin + n <= size() (a caller bug otherwise: aborts with a message).
  void Read(uint64_t begin, size_t n, int32_t* out) const;

 private:
  struct Mapping;
  TokenShard() = default;
  std::shared_ptr<const Mapping> mapping_;
  const uint8_t* payload_ = nullptr;
  std::string path_;
  uint64_t token_count_ = 0;
  int vocab_size_ = 0;
  int token_bytes_ = 0;
  uint32_t payload_crc_ = 0;
};

// Writes one shard: tokens go to `path + ".tmp"`; Finish() writes the header, fsyncs,
// renames to `path` and fsyncs the directory. So a file under `path` is always
// complete. Destroyed without Finish(), the temporary file is removed. Move-only.
class TokenShardWriter {
 public:
  // token_bytes is 2 or 4; vocab_size must fit the width (<= 65536 for 2 bytes).
  static absl::StatusOr<TokenShardWriter> Create(const std::string& path, int vocab_size,
                                                 int token_bytes);
  TokenShardWriter(TokenShardWriter&& other) noexcept;
  TokenShardWriter& operator=(TokenShardWriter&& other) noexcept;
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;
  ~TokenShardWriter();

  // Appends tokens; each must be < vocab_size (else InvalidArgument, nothing written).
  // Write errors (e.g. a full disk) name the file.
  absl::Status Append(absl::Span<const uint32_t> tokens);
  absl::Status Finish();

  uint64_t tokens_written() const { return token_count_; }
  uint32_t payload_crc() const { return payload_crc_; }  // of the tokens so far
  const std::string& path() const { return path_; }

 private:
  TokenShardWriter() = default;
  absl::Status FlushBuffer();
  void Abandon();  // close + unlink the temporary file

  std::string path_, tmp_path_;
  int fd_ = -1;
  int vocab_size_ = 0;
  int token_bytes_ = 0;
  uint64_t token_count_ = 0;
  uint32_t payload_crc_ = 0;
  std::string buffer_;  // encoded tokens not yet written
};

}  // namespace rt::data
