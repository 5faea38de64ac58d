// Manifest file lists and whole-file verification (see data_files.h).
#include "fetch/data_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "core/crc32c.h"
#include "data/durable_file.h"
#include "data/token_shard.h"

namespace rt::fetch {
namespace {

// A read-only mapping of a whole file (empty files map to an empty span).
class MappedFile {
 public:
  ~MappedFile() {
    if (addr_ != nullptr) munmap(addr_, size_);
  }
  absl::Status Map(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return data::ErrnoStatus(errno, "open " + path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return data::ErrnoStatus(err, "stat " + path);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* a = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (a == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return data::ErrnoStatus(err, "mmap " + path);
      }
      addr_ = a;
      madvise(addr_, size_, MADV_SEQUENTIAL);
    }
    close(fd);
    return absl::OkStatus();
  }
  absl::Span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(addr_), addr_ == nullptr ? 0 : size_};
  }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

std::vector<DataFile> ManifestFiles(const data::DataManifest& manifest) {
  std::vector<DataFile> files;
  if (!manifest.tokenizer_file.empty()) files.push_back({manifest.tokenizer_file, 0});
  for (const data::ShardEntry& e : manifest.shards) {
    files.push_back(
        {e.file, data::kShardHeaderBytes + e.tokens * static_cast<uint64_t>(manifest.token_bytes)});
  }
  return files;
}

const DataFile* FindFile(const std::vector<DataFile>& files, const std::string& name) {
  for (const DataFile& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status VerifyDataFile(const data::DataManifest& manifest, const std::string& name,
                            const std::string& path) {
  MappedFile file;
  if (absl::Status st = file.Map(path); !st.ok()) return st;
  if (name == manifest.tokenizer_file) {
    const uint32_t crc = Crc32c(file.bytes().data(), file.bytes().size());
    if (crc != manifest.tokenizer_crc) {
      return absl::DataLossError(absl::StrFormat("%s: checksum %08x, the manifest says %08x", name,
                                                 crc, manifest.tokenizer_crc));
    }
    return absl::OkStatus();
  }
  for (const data::ShardEntry& e : manifest.shards) {
    if (e.file != name) continue;
    absl::StatusOr<data::TokenShardHeader> h = data::ValidateTokenShard(file.bytes(), name);
    if (!h.ok()) return absl::DataLossError(h.status().message());
    if (h->payload_crc != e.crc) {
      return absl::DataLossError(absl::StrFormat(
          "%s: payload checksum %08x, the manifest says %08x", name, h->payload_crc, e.crc));
    }
    if (h->token_count != e.tokens || h->vocab_size != manifest.vocab_size ||
        h->token_bytes != manifest.token_bytes) {
      return absl::DataLossError(absl::StrFormat(
          "%s: %d tokens of %d bytes, vocab %d; the manifest says %d tokens of %d bytes, vocab %d",
          name, h->token_count, h->token_bytes, h->vocab_size, e.tokens, manifest.token_bytes,
          manifest.vocab_size));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s is not listed in the manifest", name));
}

}  // namespace rt::fetch
