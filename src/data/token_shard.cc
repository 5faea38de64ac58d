// Implementation of token shard reading (mmap + validation) and writing (see token_shard.h).
#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"
#include "core/status_macros.h"
#include "data/durable_file.h"

namespace rt::data {
namespace {

// The project targets x86-64 (little-endian), so the file's little-endian integers
// are read and written with memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards assume a little-endian host");

constexpr size_t kHeaderCrcBytes = 36;  // header_crc32c covers bytes [0, 36)
constexpr size_t kWriteBufferBytes = 1 << 20;

template <typename T>
T LoadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void StoreLe(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void EncodeHeader(uint8_t* h, int token_bytes, int vocab_size, uint64_t count, uint32_t crc) {
  std::memset(h, 0, kShardHeaderBytes);
  std::memcpy(h, kShardMagic, 8);
  StoreLe<uint32_t>(h + 8, kShardVersion);
  StoreLe<uint32_t>(h + 12, static_cast<uint32_t>(token_bytes));
  StoreLe<uint32_t>(h + 16, static_cast<uint32_t>(vocab_size));
  StoreLe<uint32_t>(h + 20, 0);
  StoreLe<uint64_t>(h + 24, count);
  StoreLe<uint32_t>(h + 32, crc);
  StoreLe<uint32_t>(h + 36, Crc32c(h, kHeaderCrcBytes));
}

absl::Status TruncatedHeader(const std::string& path, uint64_t file_bytes) {
  return absl::DataLossError(
      absl::StrFormat("token shard %s is truncated: %d bytes, shorter than the %d-byte header",
                      path, file_bytes, kShardHeaderBytes));
}

}  // namespace

absl::StatusOr<TokenShardHeader> ValidateTokenShard(absl::Span<const uint8_t> file,
                                                    const std::string& path) {
  const uint64_t file_bytes = file.size();
  if (file_bytes < kShardHeaderBytes) return TruncatedHeader(path, file_bytes);
  const uint8_t* h = file.data();

  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("token shard ", path, ": ", what));
  };
  if (std::memcmp(h, kShardMagic, 8) != 0) return bad("bad magic (not a ringtrain token shard)");
  const uint32_t header_crc = LoadLe<uint32_t>(h + 36);
  if (Crc32c(h, kHeaderCrcBytes) != header_crc)
    return bad("header checksum mismatch (corrupt header)");
  const uint32_t version = LoadLe<uint32_t>(h + 8);
  if (version != kShardVersion) {
    return bad(
        absl::StrFormat("unsupported version %d (this build reads %d)", version, kShardVersion));
  }
  const uint32_t token_bytes = LoadLe<uint32_t>(h + 12);
  if (token_bytes != 2 && token_bytes != 4) {
    return bad(absl::StrFormat("token width %d bytes (must be 2 or 4)", token_bytes));
  }
  const uint32_t vocab = LoadLe<uint32_t>(h + 16);
  if (vocab == 0 || vocab > 0x7fffffffu || (token_bytes == 2 && vocab > 65536)) {
    return bad(absl::StrFormat("vocab size %d does not fit %d-byte tokens", vocab, token_bytes));
  }
  if (LoadLe<uint32_t>(h + 20) != 0) return bad("reserved header field is not zero");
  for (size_t i = 40; i < kShardHeaderBytes; ++i) {
    if (h[i] != 0) return bad("reserved header bytes are not zero");
  }
  const uint64_t count = LoadLe<uint64_t>(h + 24);
  const uint64_t room = (file_bytes - kShardHeaderBytes) / token_bytes;  // tokens that fit
  if (count > room || kShardHeaderBytes + count * token_bytes != file_bytes) {
    return bad(absl::StrFormat(
        "%s: header says %d tokens (%.0f bytes with the header), file has %d bytes",
        count > room ? "truncated" : "wrong size (extra bytes after the tokens)", count,
        static_cast<double>(count) * token_bytes + kShardHeaderBytes, file_bytes));
  }
  const uint8_t* payload = h + kShardHeaderBytes;
  const uint32_t payload_crc = LoadLe<uint32_t>(h + 32);
  if (Crc32c(payload, count * token_bytes) != payload_crc) {
    return bad("payload checksum mismatch (corrupt tokens)");
  }
  // Out-of-range ids would index past the embedding table: refuse them here.
  uint32_t max_token = 0;
  if (token_bytes == 2) {
    for (uint64_t i = 0; i < count; ++i)
      max_token = std::max<uint32_t>(max_token, LoadLe<uint16_t>(payload + 2 * i));
  } else {
    for (uint64_t i = 0; i < count; ++i)
      max_token = std::max(max_token, LoadLe<uint32_t>(payload + 4 * i));
  }
  if (count > 0 && max_token >= vocab) {
    return bad(absl::StrFormat("token %d is outside the vocabulary of %d", max_token, vocab));
  }

  TokenShardHeader header;
  header.token_count = count;
  header.vocab_size = static_cast<int>(vocab);
  header.token_bytes = static_cast<int>(token_bytes);
  header.payload_crc = payload_crc;
  return header;
}

struct TokenShard::Mapping {
  void* addr = nullptr;
  size_t bytes = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, bytes);
  }
};

absl::StatusOr<TokenShard> TokenShard::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "token shard " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "stat token shard " + path);
  }
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kShardHeaderBytes) {
    ::close(fd);
    return TruncatedHeader(path, file_bytes);
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);
  if (mapping->addr == MAP_FAILED) {
    mapping->addr = nullptr;
    return ErrnoStatus(map_err, "mmap token shard " + path);
  }
  mapping->bytes = file_bytes;
  const uint8_t* h = static_cast<const uint8_t*>(mapping->addr);
  ASSIGN_OR_RETURN(const TokenShardHeader header, ValidateTokenShard({h, file_bytes}, path));

  TokenShard shard;
  shard.mapping_ = std::move(mapping);
  shard.payload_ = h + kShardHeaderBytes;
  shard.path_ = path;
  shard.token_count_ = header.token_count;
  shard.vocab_size_ = header.vocab_size;
  shard.token_bytes_ = header.token_bytes;
  shard.payload_crc_ = header.payload_crc;
  return shard;
}

void TokenShard::Read(uint64_t begin, size_t n, int32_t* out) const {
  if (begin > token_count_ || n > token_count_ - begin) {
    std::fprintf(stderr, "TokenShard::Read(%llu, %zu) past the end of %s (%llu tokens)\n",
                 static_cast<unsigned long long>(begin), n, path_.c_str(),
                 static_cast<unsigned long long>(token_count_));
    std::abort();
  }
  if (token_bytes_ == 2) {
    const uint8_t* p = payload_ + 2 * begin;
    for (size_t i = 0; i < n; ++i) out[i] = LoadLe<uint16_t>(p + 2 * i);
  } else {
    const uint8_t* p = payload_ + 4 * begin;
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(LoadLe<uint32_t>(p + 4 * i));
  }
}

absl::StatusOr<TokenShardWriter> TokenShardWriter::Create(const std::string& path, int vocab_size,
                                                          int token_bytes) {
  if (token_bytes != 2 && token_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token shard %s: token width %d (must be 2 or 4)", path, token_bytes));
  }
  if (vocab_size <= 0 || (token_bytes == 2 && vocab_size > 65536)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("token shard %s: vocab size %d does not fit %d-byte tokens", path,
                        vocab_size, token_bytes));
  }
  TokenShardWriter w;
  w.path_ = path;
  w.tmp_path_ = path + ".tmp";
  w.vocab_size_ = vocab_size;
  w.token_bytes_ = token_bytes;
  w.fd_ = ::open(w.tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd_ < 0) return ErrnoStatus(errno, "create token shard " + w.tmp_path_);
  // Placeholder header (all zero: not a valid shard) until Finish() writes the real one.
  uint8_t zeros[kShardHeaderBytes] = {};
  RETURN_IF_ERROR(WriteAll(w.fd_, zeros, sizeof(zeros), w.tmp_path_));
  return w;
}

TokenShardWriter::TokenShardWriter(TokenShardWriter&& o) noexcept { *this = std::move(o); }

TokenShardWriter& TokenShardWriter::operator=(TokenShardWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    path_ = std::move(o.path_);
    tmp_path_ = std::move(o.tmp_path_);
    fd_ = o.fd_;
    o.fd_ = -1;
    vocab_size_ = o.vocab_size_;
    token_bytes_ = o.token_bytes_;
    token_count_ = o.token_count_;
    payload_crc_ = o.payload_crc_;
    buffer_ = std::move(o.buffer_);
  }
  return *this;
}

TokenShardWriter::~TokenShardWriter() { Abandon(); }

void TokenShardWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
    fd_ = -1;
  }
}

absl::Status TokenShardWriter::Append(absl::Span<const uint32_t> tokens) {
  if (fd_ < 0) return absl::FailedPreconditionError("token shard " + path_ + " is not open");
  if (tokens.empty()) return absl::OkStatus();
  for (uint32_t t : tokens) {
    if (t >= static_cast<uint32_t>(vocab_size_)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "token shard %s: token %d is outside the vocabulary of %d", path_, t, vocab_size_));
    }
  }
  const size_t old = buffer_.size();
  buffer_.resize(old + tokens.size() * token_bytes_);
  uint8_t* p = reinterpret_cast<uint8_t*>(&buffer_[old]);
  if (token_bytes_ == 2) {
    for (size_t i = 0; i < tokens.size(); ++i)
      StoreLe<uint16_t>(p + 2 * i, static_cast<uint16_t>(tokens[i]));
  } else {
    std::memcpy(p, tokens.data(), tokens.size() * 4);
  }
  payload_crc_ = Crc32cExtend(payload_crc_, p, tokens.size() * token_bytes_);
  token_count_ += tokens.size();
  if (buffer_.size() >= kWriteBufferBytes) return FlushBuffer();
  return absl::OkStatus();
}

absl::Status TokenShardWriter::FlushBuffer() {
  absl::Status st = WriteAll(fd_, buffer_.data(), buffer_.size(), tmp_path_);
  buffer_.clear();
  if (!st.ok()) Abandon();
  return st;
}

absl::Status TokenShardWriter::Finish() {
  if (fd_ < 0) return absl::FailedPreconditionError("token shard " + path_ + " is not open");
  RETURN_IF_ERROR(FlushBuffer());
  uint8_t header[kShardHeaderBytes];
  EncodeHeader(header, token_bytes_, vocab_size_, token_count_, payload_crc_);
  absl::Status st = PwriteAll(fd_, header, sizeof(header), 0, tmp_path_);
  if (st.ok()) st = SyncFd(fd_, tmp_path_);
  if (!st.ok()) {
    Abandon();
    return st;
  }
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, "close " + tmp_path_);
  }
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path_.c_str());
    return ErrnoStatus(err, "rename " + tmp_path_ + " to " + path_);
  }
  return SyncParentDir(path_);
}

}  // namespace rt::data
